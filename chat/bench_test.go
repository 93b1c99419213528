package chat

import (
	"testing"
)

func BenchmarkBusyLoop(b *testing.B) {
	tpl := MustParse(`{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}`, "b")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tpl.Render(Input{Messages: Messages()}); err != nil {
			b.Fatal(err)
		}
	}
}
