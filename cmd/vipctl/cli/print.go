package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/vipd/vipd/agent/apipb"
)

// printer renders API answers as text; times are shown in loc relative to
// now (a clock time today, a date and time otherwise).
type printer struct {
	now time.Time
	loc *time.Location
}

func (e *env) printer() printer { return printer{now: e.now(), loc: e.loc} }

func (p printer) status(out io.Writer, st *apipb.StatusResponse) {
	// Names come from the network: a control character in one (a newline,
	// an escape sequence) is shown escaped, never sent to the terminal.
	w := escaper{out}
	flags := []string{}
	if st.GetWithdrawn() {
		flags = append(flags, "WITHDRAWN")
	}
	if !st.GetQuorum() {
		flags = append(flags, "NO QUORUM")
	}
	if !st.GetHealthy() {
		flags = append(flags, "unhealthy")
	}
	fmt.Fprintln(w, strings.TrimSpace(fmt.Sprintf("node %s (vipd %s) %s", sanitizeName(st.GetNode()), st.GetVersion(), strings.Join(flags, " "))))
	if line := p.quorumLine(st); line != "" {
		fmt.Fprintln(w, line)
	}
	if line := p.kubernetesLine(st); line != "" {
		fmt.Fprintln(w, line)
	}
	for _, warn := range st.GetWarnings() {
		fmt.Fprintln(w, "warning: "+warn)
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VIP\tADDRESS\tMODE\tOWNER\tHELD HERE\tHOLDERS")
	for _, v := range st.GetVips() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.GetName(), v.GetAddress(), v.GetMode(), orDash(sanitizeName(v.GetOwner())), yesNo(v.GetHeld()), orDash(sanitizeName(strings.Join(v.GetHolders(), ","))))
	}
	tw.Flush()

	// Eligibility: for every VIP, who may own it now, and why not.
	if hasEligibility(st) {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VIP\tNODE\tELIGIBLE\tPRIORITY\tORDER\tWHY NOT")
		for _, v := range st.GetVips() {
			for _, el := range v.GetEligibility() {
				name := sanitizeName(el.GetNode())
				if el.GetNode() == st.GetNode() {
					name += " (this node)"
				}
				why := "-"
				switch {
				case !el.GetEligible():
					why = p.eligibility(el)
				case el.GetWaiting():
					why = "waits out its preempt delay"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.GetName(), name, yesNo(el.GetEligible()), orDash(nonZero(el.GetPriority())), orDash(nonZero(el.GetOrder())), why)
			}
		}
		tw.Flush()
	}

	var health []string
	for _, v := range st.GetVips() {
		if d := v.GetHealthDetail(); d != "" {
			health = append(health, v.GetName()+": "+d)
		}
	}
	if len(health) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "HEALTH CHECKS (this node)")
		for _, h := range health {
			fmt.Fprintln(w, h)
		}
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tADDRESS\tSTATE\tWITHDRAWN\tHEALTHY")
	for _, m := range st.GetMembers() {
		name := sanitizeName(m.GetName())
		if m.GetSelf() {
			name += " (this node)"
		}
		withdrawn := yesNo(m.GetWithdrawn())
		if m.GetNodeWithdrawn() {
			withdrawn += " (by its Node)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, m.GetAddress(), m.GetState(), withdrawn, yesNo(m.GetHealthy()))
	}
	tw.Flush()

	if len(st.GetBgpPeers()) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "BGP PEER\tASN\tSTATE\tUPTIME\tRECEIVED\tACCEPTED\tADVERTISED\tMAX PREFIXES\tBFD")
		for _, b := range st.GetBgpPeers() {
			maxp := "-"
			if b.GetMaxPrefixes() > 0 {
				maxp = strconv.FormatUint(uint64(b.GetMaxPrefixes()), 10)
			}
			bfd := "off"
			if b.GetBfdState() != "" {
				bfd = b.GetBfdState()
				if d := b.GetBfdDiagnostic(); d != "" {
					bfd += " (" + d + ")"
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", b.GetAddress(), b.GetAsn(), b.GetState(),
				time.Duration(b.GetUptimeSeconds())*time.Second, b.GetReceived(), b.GetAccepted(), b.GetAdvertised(), maxp, bfd)
		}
		tw.Flush()
	}
}

// quorumLine is "quorum: 3 of 3 known members alive; fence held (...)", or
// "" when vipd does not report member counts.
func (p printer) quorumLine(st *apipb.StatusResponse) string {
	if st.GetKnownMembers() == 0 {
		return ""
	}
	q := "quorum"
	if !st.GetQuorum() {
		q = "no quorum"
	}
	line := fmt.Sprintf("%s: %d of %d known members alive", q, st.GetAliveMembers(), st.GetKnownMembers())
	f := st.GetFence()
	if f == nil || f.GetState() == "" {
		return line
	}
	age := "never confirmed by a majority"
	if f.GetEvidenceAgeMs() >= 0 {
		age = "majority confirmed " + ms(f.GetEvidenceAgeMs()) + " ago"
	}
	switch f.GetState() {
	case "off":
		return line + "; fence off (quorum not required)"
	case "held":
		return line + "; fence held (" + age + ")"
	case "expired":
		return line + "; fence expired (" + age + "; VIPs are released " + ms(f.GetReleaseAfterMs()) + " after the last confirmation)"
	}
	return line + "; fence " + f.GetState()
}

// kubernetesLine is the Node watch in one line: "kubernetes: node cp-1
// cordoned → withdrawn", "kubernetes: node cp-1 → eligible", with the
// apiserver's trouble when it cannot be read; off, how to turn it on;
// "" for a vipd that does not say (older ones said nothing when it was
// off).
func (p printer) kubernetesLine(st *apipb.StatusResponse) string {
	k := st.GetKubernetes()
	if k == nil {
		return ""
	}
	if !k.GetEnabled() {
		return "kubernetes: off: a cordon, drain or deletion of this host's Node does not move the VIP; to follow it, set [kubernetes] enabled = true (docs/drain.md)"
	}
	if k.GetKubeconfig() == "" {
		// A kubeconfig found but not read (no permission, broken): the
		// error says which and why.
		if e := k.GetError(); e != "" && !strings.HasPrefix(e, "no kubeconfig found") {
			return "kubernetes: the kubeconfig cannot be used, so a cordoned or deleted Node does not withdraw this node: " + e
		}
		line := "kubernetes: waiting for a kubelet kubeconfig"
		if k.GetExplicit() {
			line = "kubernetes: enabled, but no kubeconfig is found; a cordoned or deleted Node does not withdraw this node"
		}
		if e := k.GetError(); e != "" {
			line += " (" + e + ")"
		}
		return line
	}
	node := orDash(sanitizeName(k.GetNode()))
	var line string
	if rs := st.GetNodeWithdrawReasons(); len(rs) > 0 {
		var what []string
		for _, r := range rs {
			what = append(what, strings.TrimPrefix(r, "node "))
		}
		line = fmt.Sprintf("kubernetes: node %s %s → withdrawn", node, strings.Join(what, ", "))
	} else {
		line = fmt.Sprintf("kubernetes: node %s → eligible", node)
		if k.GetReachable() && !k.GetRegistered() {
			line = fmt.Sprintf("kubernetes: node %s not registered yet → eligible", node)
		}
	}
	if t := k.GetVerdictSinceUnixNano(); t > 0 {
		line += " since " + p.clock(time.Unix(0, t))
	}
	line += " (" + k.GetServer() + ")"
	if !k.GetReachable() {
		since := ""
		if t := k.GetSinceUnixNano(); t > 0 {
			since = " since " + p.clock(time.Unix(0, t))
		}
		line += "; API not readable" + since + ", verdict kept: " + orDash(k.GetError())
	}
	return line
}

func ms(n int64) string { return (time.Duration(n) * time.Millisecond).String() }

// nonZero is n in decimal, "" for 0 (a server that does not report it,
// or a node that is not eligible).
func nonZero(n int32) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(int(n))
}

func hasEligibility(st *apipb.StatusResponse) bool {
	for _, v := range st.GetVips() {
		if len(v.GetEligibility()) > 0 {
			return true
		}
	}
	return false
}

// eligibility is "eligible", or the reason a node is not eligible with the
// time its state changed: "unhealthy since 12:03:10".
func (p printer) eligibility(el *apipb.NodeEligibility) string {
	if el.GetEligible() {
		return "eligible"
	}
	r := orDash(el.GetReason())
	if el.GetSinceUnixNano() > 0 {
		r += " since " + p.clock(time.Unix(0, el.GetSinceUnixNano()))
	}
	return r
}

// holdsIt is ", holds it" when node is among v's holders.
func holdsIt(v *apipb.VIPStatus, node string) string {
	for _, h := range v.GetHolders() {
		if h == node {
			return ", holds it"
		}
	}
	return ""
}

// clock is t as a time of day when it is today in p.loc, else with its date.
func (p printer) clock(t time.Time) string {
	t, now := t.In(p.loc), p.now.In(p.loc)
	if t.Year() == now.Year() && t.YearDay() == now.YearDay() {
		return t.Format("15:04:05")
	}
	return t.Format("2006-01-02 15:04:05")
}

// escaper writes text with control characters other than newline and tab
// shown as Go escapes.
type escaper struct{ w io.Writer }

func (e escaper) Write(b []byte) (int, error) {
	if _, err := io.WriteString(e.w, escapeControls(string(b))); err != nil {
		return 0, err
	}
	return len(b), nil
}

// escapeControls shows control and non-printing characters of s, but
// newlines and tabs, as Go escapes.
func escapeControls(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r != '\n' && r != '\t' && !unicode.IsPrint(r) }) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r == '\n' || r == '\t' || unicode.IsPrint(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRune(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

// sanitizeName is a name from the network, safe to print.
func sanitizeName(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(escapeControls(s), "\n", `\n`), "\t", `\t`)
}

func (p printer) event(e *apipb.Event) string {
	t := time.Unix(0, e.GetUnixNano()).In(p.loc).Format(time.RFC3339Nano)
	parts := []string{t, e.GetKind()}
	for _, kv := range [][2]string{{"vip", e.GetVip()}, {"node", e.GetNode()}, {"from", e.GetFrom()}, {"to", e.GetTo()}, {"reason", e.GetReason()}, {"message", e.GetMessage()}} {
		if kv[1] != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", kv[0], kv[1]))
		}
	}
	return strings.Join(parts, " ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
