package docsnippets

import (
	"strings"
	"testing"
)

func TestParseInfoStrings(t *testing.T) {
	cases := []struct {
		info   string
		tag    Tag
		reason string
		err    string // substring of the error, "" for none
	}{
		{info: "sh run-cpu", tag: RunCPU},
		{info: "bash run-gpu", tag: RunGPU},
		{info: "python not-run: needs the network", tag: NotRun, reason: "needs the network"},
		{info: "console not-run:   54 GB  ", tag: NotRun, reason: "54 GB"},
		{info: "Shell run-cpu", tag: RunCPU},
		{info: "py run-cpu", tag: RunCPU},
		{info: "go"},
		{info: "json"},
		{info: "text"},
		{info: "sh", err: "untagged sh block"},
		{info: "python", err: "untagged python block"},
		{info: "console", err: "untagged console block"},
		{info: "", err: "without a language"},
		{info: "sh run-cpu please", err: `unknown tag "run-cpu please"`},
		{info: "sh runcpu", err: `unknown tag "runcpu"`},
		{info: "sh not-run", err: `unknown tag "not-run"`},
		{info: "sh not-run:", err: "needs a reason"},
		{info: "sh not-run:   ", err: "needs a reason"},
		{info: "go run-cpu", err: "only shell and Python blocks take a tag"},
		{info: "text not-run: why", err: "only shell and Python blocks take a tag"},
		{info: "go title=main.go"},
	}
	for _, c := range cases {
		src := "intro\n\n```" + c.info + "\necho hi\n```\n"
		blocks, err := ParseFile("x.md", []byte(src))
		if err != nil {
			t.Fatalf("%q: %v", c.info, err)
		}
		if len(blocks) != 1 {
			t.Fatalf("%q: %d blocks, want 1", c.info, len(blocks))
		}
		b := blocks[0]
		cerr := b.Check()
		switch {
		case c.err == "" && cerr != nil:
			t.Errorf("%q: unexpected error %v", c.info, cerr)
		case c.err != "" && (cerr == nil || !strings.Contains(cerr.Error(), c.err)):
			t.Errorf("%q: error %v, want one containing %q", c.info, cerr, c.err)
		case c.err != "" && !strings.HasPrefix(cerr.Error(), "x.md:3: "):
			t.Errorf("%q: error %q does not start with the fence's file:line", c.info, cerr)
		}
		if c.err == "" && (b.Tag != c.tag || b.Reason != c.reason) {
			t.Errorf("%q: tag %v reason %q, want %v %q", c.info, b.Tag, b.Reason, c.tag, c.reason)
		}
	}
}

func TestParseFences(t *testing.T) {
	src := strings.Join([]string{
		"# doc",                            // 1
		"Inline ```sh``` is prose.",        // 2
		"~~~~python run-cpu",               // 3
		"print('```not a fence')",          // 4
		"```",                              // 5: shorter run of another character: body
		"~~~~",                             // 6
		"1. a step:",                       // 7
		"",                                 // 8
		"   ````sh not-run: inside a list", // 9
		"   echo one",                      // 10
		"     echo two",                    // 11
		"   ```",                           // 12: shorter than the opening: body
		"   ````",                          // 13
		"```text\r",                        // 14
		"plain\r",                          // 15
		"```\r",                            // 16
	}, "\n")
	blocks, err := ParseFile("d.md", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 {
		t.Fatalf("%d blocks, want 3: %+v", len(blocks), blocks)
	}
	want := []struct {
		line int
		lang string
		tag  Tag
		body string
	}{
		{3, "python", RunCPU, "print('```not a fence')\n```\n"},
		{9, "sh", NotRun, "echo one\n  echo two\n```\n"},
		{14, "text", Untagged, "plain\n"},
	}
	for i, w := range want {
		b := blocks[i]
		if b.Line != w.line || b.Lang != w.lang || b.Tag != w.tag || b.Body != w.body {
			t.Errorf("block %d: line %d lang %q tag %v body %q; want %d %q %v %q",
				i, b.Line, b.Lang, b.Tag, b.Body, w.line, w.lang, w.tag, w.body)
		}
		if err := b.Check(); err != nil {
			t.Errorf("block %d: %v", i, err)
		}
	}
}

func TestUnclosedFence(t *testing.T) {
	_, err := ParseFile("u.md", []byte("text\n\n```sh run-cpu\necho never closed\n"))
	if err == nil || !strings.Contains(err.Error(), "u.md:3: code fence opened here is never closed") {
		t.Fatalf("err = %v, want the unclosed fence named at u.md:3", err)
	}
}

func TestPlanAddsSetupBlocksForGPU(t *testing.T) {
	blocks := []Block{
		{File: "a.md", Line: 1, Lang: "sh", Tag: RunCPU},
		{File: "a.md", Line: 5, Lang: "python", Tag: RunGPU},
		{File: "a.md", Line: 9, Lang: "sh", Tag: RunCPU}, // after the last GPU block: not needed
		{File: "b.md", Line: 1, Lang: "sh", Tag: RunCPU}, // no GPU block in b.md
		{File: "b.md", Line: 3, Lang: "sh", Tag: NotRun},
		{File: "c.md", Line: 2, Lang: "sh", Tag: RunGPU},
	}
	got := func(plan []Result) string {
		var s []string
		for _, r := range plan {
			w := r.Block.Where()
			if r.Setup {
				w += "(setup)"
			}
			s = append(s, w)
		}
		return strings.Join(s, " ")
	}
	if g, w := got(Plan(blocks, RunGPU)), "a.md:1(setup) a.md:5 c.md:2"; g != w {
		t.Errorf("run-gpu plan %q, want %q", g, w)
	}
	if g, w := got(Plan(blocks, RunCPU)), "a.md:1 a.md:9 b.md:1"; g != w {
		t.Errorf("run-cpu plan %q, want %q", g, w)
	}
}

func TestScript(t *testing.T) {
	dir := "/w/01-docs"
	b := Block{Lang: "sh", Body: "qwenref synth --out /tmp/q08\nls /tmp/q08 \"/tmp/x\" x=/tmp/y /var/tmp/z a/tmp/b\n"}
	got, err := Script(b, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := "set -euo pipefail\nqwenref synth --out /w/01-docs/tmp/q08\nls /w/01-docs/tmp/q08 \"/w/01-docs/tmp/x\" x=/w/01-docs/tmp/y /var/tmp/z a/tmp/b\n"
	if got != want {
		t.Errorf("sh script:\n%q\nwant\n%q", got, want)
	}

	c := Block{Lang: "console", Body: "$ qwenref forward --model m \\\n    --out /tmp/x.safetensors\nqwenref forward: an error\n$ echo done\ndone\n"}
	got, err = Script(c, dir)
	if err != nil {
		t.Fatal(err)
	}
	want = "set -euo pipefail\nqwenref forward --model m \\\n    --out /w/01-docs/tmp/x.safetensors\necho done\n"
	if got != want {
		t.Errorf("console script:\n%q\nwant\n%q", got, want)
	}
	if _, err := Script(Block{Lang: "console", Body: "output only\n"}, dir); err == nil {
		t.Error("a console block without a $ line gave no error")
	}

	p := Block{Lang: "python", Body: "open('/tmp/f', 'w')\n"}
	if got, _ := Script(p, dir); got != "open('/w/01-docs/tmp/f', 'w')\n" {
		t.Errorf("python script %q", got)
	}
}
