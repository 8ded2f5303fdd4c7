package netlab

import (
	"fmt"
	"strings"
	"time"
)

// WaitMember waits (bounded by timeout) until every node in observers other
// than about sees about as a member for which ok is true; what describes
// the condition in the error.
func (l *Lab) WaitMember(about *Host, observers []*Host, timeout time.Duration, what string, ok func(Member) bool) error {
	good, detail := Eventually(timeout, 50*time.Millisecond, func() (bool, string) {
		var seen []string
		all := true
		for _, o := range observers {
			if o == about {
				continue
			}
			st, err := l.Status(o)
			if err != nil {
				return false, err.Error()
			}
			m, found := st.Member(about.Name)
			if !found {
				seen = append(seen, fmt.Sprintf("%s does not know %s", o.Name, about.Name))
				all = false
				continue
			}
			seen = append(seen, fmt.Sprintf("%s sees %s %s (withdrawn=%v healthy=%v)", o.Name, about.Name, m.State, m.Withdrawn, m.Healthy))
			all = all && ok(m)
		}
		return all, strings.Join(seen, "; ")
	})
	if !good {
		return fmt.Errorf("want %s %s on every other node within %v, saw: %s", about.Name, what, timeout, detail)
	}
	return nil
}

// WaitAlive waits until every node in observers other than about reports
// about as an alive member.
func (l *Lab) WaitAlive(about *Host, observers []*Host, timeout time.Duration) error {
	return l.WaitMember(about, observers, timeout, "alive", func(m Member) bool { return m.State == "alive" })
}

// WaitFormed waits until every node sees every other node alive.
func (l *Lab) WaitFormed(timeout time.Duration) error {
	for _, n := range l.Nodes {
		if err := l.WaitAlive(n, l.Nodes, timeout); err != nil {
			return fmt.Errorf("cluster did not form: %w", err)
		}
	}
	return nil
}

// WaitSteady waits until the cluster has formed and exactly one node holds
// vip (see OneHolder), and returns that node.
func (l *Lab) WaitSteady(vip VIP, timeout time.Duration) (*Host, error) {
	if err := l.WaitFormed(timeout); err != nil {
		return nil, err
	}
	holder, err := l.WaitOneHolder(vip, timeout)
	if err != nil {
		return nil, fmt.Errorf("steady state: want exactly one holder of %s: %w", vip.Address, err)
	}
	return l.Node(holder), nil
}

// Others returns the lab's nodes except h.
func (l *Lab) Others(h *Host) []*Host {
	var out []*Host
	for _, n := range l.Nodes {
		if n != h {
			out = append(out, n)
		}
	}
	return out
}
