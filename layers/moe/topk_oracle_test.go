package moe

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// topkOracle is ATen's CPU topk selection (TopKImpl.h) as a C++ program on
// this machine's libstdc++: for each input line "k n v0 v1 …" it prints the
// k chosen indices.
const topkOracle = `#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>
int main() {
  int k, n;
  while (std::scanf("%d %d", &k, &n) == 2) {
    std::vector<std::pair<float, long>> q(n);
    for (int i = 0; i < n; i++) { std::scanf("%f", &q[i].first); q[i].second = i; }
    auto comp = [](const std::pair<float, long>& x, const std::pair<float, long>& y) {
      return (std::isnan(x.first) && !std::isnan(y.first)) || (x.first > y.first);
    };
    if ((long)k * 64 <= n) {
      std::partial_sort(q.begin(), q.begin() + k, q.end(), comp);
    } else {
      std::nth_element(q.begin(), q.begin() + k - 1, q.end(), comp);
      std::sort(q.begin(), q.begin() + k - 1, comp);
    }
    for (int j = 0; j < k; j++) std::printf("%ld ", q[j].second);
    std::printf("\n");
  }
}
`

// torchTopK must choose exactly what torch.topk chooses on the CPU,
// ties included, on both of its paths (partial_sort for k·64 ≤ n, else
// nth_element): checked against the C++ standard library it calls, built
// here with g++, on inputs drawn from a few values so that ties abound.
func TestTorchTopKMatchesLibstdcxx(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ is not installed; the oracle is libstdc++ itself")
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "topk.cc"), filepath.Join(dir, "topk")
	if err := os.WriteFile(src, []byte(topkOracle), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gxx, "-O1", "-std=c++17", "-o", bin, src).CombinedOutput(); err != nil {
		t.Skipf("g++ could not build the oracle: %v\n%s", err, out)
	}
	r := rand.New(rand.NewPCG(7, 7))
	type tc struct {
		k int
		p []float32
	}
	var cases []tc
	var in strings.Builder
	for i := 0; i < 3000; i++ {
		n := 1 + r.IntN(300)
		if i%3 == 0 {
			n = 1 + r.IntN(20)
		}
		k := 1 + r.IntN(min(n, 12))
		levels := 1 + r.IntN(6) // few distinct values: many ties
		p := make([]float32, n)
		for j := range p {
			p[j] = float32(r.IntN(levels)) / 8
		}
		cases = append(cases, tc{k, p})
		fmt.Fprintf(&in, "%d %d", k, n)
		for _, v := range p {
			fmt.Fprintf(&in, " %g", v)
		}
		in.WriteByte('\n')
	}
	cmd := exec.Command(bin)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for i, c := range cases {
		if !sc.Scan() {
			t.Fatalf("oracle stopped after %d cases", i)
		}
		idx, w := make([]int32, c.k), make([]float32, c.k)
		torchTopK(idx, w, c.p)
		if got := strings.TrimSpace(fmt.Sprint(idx)); got != "["+strings.TrimSpace(sc.Text())+"]" {
			t.Fatalf("case %d (k=%d, n=%d): torchTopK %v, libstdc++ [%s]", i, c.k, len(c.p), idx, strings.TrimSpace(sc.Text()))
		}
		for j := range idx {
			if w[j] != c.p[idx[j]] {
				t.Fatalf("case %d: weight %d is not p[%d]", i, j, idx[j])
			}
		}
	}
}
