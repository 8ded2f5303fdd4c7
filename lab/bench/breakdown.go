package bench

import (
	"regexp"
	"strings"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// Where a vipd failover's time goes, read from the nodes' logs (text slog,
// millisecond timestamps; all nodes run on one host, so one clock):
//
//   - elected: the event to the first "ownership change" away from the old
//     owner logged by another node (the failure detected, or the owner's
//     new state seen, and the election run);
//   - holding: the event to the new owner's "holding VIP" (claim: settle,
//     the fence's evidence, the address added and the gratuitous ARP sent);
//   - the rest, to the takeover, is the client: its next probe and the ARP
//     entry it updated from the gratuitous ARP.

var (
	logTime  = regexp.MustCompile(`^time=(\S+) `)
	logMsg   = regexp.MustCompile(` msg="([^"]*)"`)
	logField = func(line, key string) string {
		m := regexp.MustCompile(` ` + key + `=("[^"]*"|\S+)`).FindStringSubmatch(line)
		if m == nil {
			return ""
		}
		return strings.Trim(m[1], `"`)
	}
)

// logLine is one parsed line of a vipd log.
type logLine struct {
	at   time.Time
	msg  string
	line string
}

func parseLog(text string) []logLine {
	var out []logLine
	for _, line := range strings.Split(text, "\n") {
		tm, mm := logTime.FindStringSubmatch(line), logMsg.FindStringSubmatch(line)
		if tm == nil || mm == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, tm[1])
		if err != nil {
			continue
		}
		out = append(out, logLine{at, mm[1], line})
	}
	return out
}

// breakdown returns, from the logs of every node (name to log text), the
// time from ev to the first ownership change away from owner logged by a
// node other than owner, and to the first "holding VIP" of to; 0 when not
// found.
func breakdown(logs map[string]string, owner, to string, ev time.Time) (elected, holding time.Duration) {
	for node, text := range logs {
		for _, l := range parseLog(text) {
			if l.at.Before(ev) {
				continue
			}
			d := l.at.Sub(ev)
			switch {
			case node != owner && l.msg == "ownership change" && logField(l.line, "from") == owner && logField(l.line, "to") != owner:
				if elected == 0 || d < elected {
					elected = d
				}
			case node == to && to != "" && l.msg == "holding VIP":
				if holding == 0 || d < holding {
					holding = d
				}
			}
		}
	}
	return elected, holding
}

// vipdLogs reads every node's vipd log.
func vipdLogs(l *netlab.Lab) map[string]string {
	out := map[string]string{}
	for _, h := range l.Nodes {
		if s, err := h.VipdLog(); err == nil {
			out[h.Name] = s
		}
	}
	return out
}
