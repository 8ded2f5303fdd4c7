package bench

import (
	"strings"
	"testing"
)

// TestMarkdownRefresh: the report keeps the refresh's cost section (which
// no bench run measures), so a new report does not drop it.
func TestMarkdownRefresh(t *testing.T) {
	md := Markdown(sample(), Machine{NProc: 2}, nil, "RUNS=2 make bench", "benchmarks.svg")
	reportHas(t, md, "## Gratuitous ARP and NA refresh", "| 3s (default) | 40 (2,400) | 20 (1,720) | 67 |")
	if i, j := strings.Index(md, "## Gratuitous ARP and NA refresh"), strings.Index(md, "## Targets"); i < j {
		t.Error("the refresh section comes before the run's own")
	}
}
