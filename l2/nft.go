package l2

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
)

// nftMu serialises the changes of vipd's nftables tables within this
// process: the Announcers of one namespace share them, and one removing a
// table it found empty must not race another adding a rule to it.
var nftMu sync.Mutex

// nftFilter implements filter on an nftables netlink connection, which is
// bound to the network namespace it was opened in.
type nftFilter struct {
	c *nftables.Conn
}

// newNftFilter opens a lasting nftables connection in the calling thread's
// network namespace.
func newNftFilter() (*nftFilter, error) {
	c, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, err
	}
	return &nftFilter{c: c}, nil
}

// nfARPIn is the arp family's input hook (NF_ARP_IN in
// linux/netfilter_arp.h; x/sys/unix does not define it).
const nfARPIn = 0

// nfARPOut is the arp family's output hook (NF_ARP_OUT).
const nfARPOut = 1

// tableOf returns the table and base chain of kind k.
func tableOf(k ruleKind) (*nftables.Table, *nftables.Chain) {
	if k == kindLingerARP {
		t := &nftables.Table{Name: LingerARPTable, Family: nftables.TableFamilyARP}
		return t, &nftables.Chain{
			Name: "output", Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookRef(nfARPOut), Priority: nftables.ChainPriorityFilter,
		}
	}
	if k == kindQuiesce {
		t := &nftables.Table{Name: QuiesceTable, Family: nftables.TableFamilyARP}
		return t, &nftables.Chain{
			Name: quiesceChain, Table: t, Type: nftables.ChainTypeFilter,
			// The arp family numbers its hooks apart: NF_ARP_IN is 0
			// (nftables.ChainHookInput, NF_INET_LOCAL_IN, would be 1:
			// NF_ARP_OUT).
			Hooknum: nftables.ChainHookRef(nfARPIn), Priority: nftables.ChainPriorityFilter,
		}
	}
	t := &nftables.Table{Name: ForwardTable, Family: nftables.TableFamilyIPv4}
	return t, &nftables.Chain{
		Name: forwardChain, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(forwardPriority),
	}
}

// rules returns the rules of t's chain c (none if the chain does not exist)
// and whether table t exists.
func (f *nftFilter) rules(t *nftables.Table, c *nftables.Chain) ([]*nftables.Rule, bool, error) {
	ts, err := f.c.ListTablesOfFamily(t.Family)
	if err != nil {
		return nil, false, fmt.Errorf("list nftables tables: %w", err)
	}
	if !slices.ContainsFunc(ts, func(x *nftables.Table) bool { return x.Name == t.Name }) {
		return nil, false, nil
	}
	cs, err := f.c.ListChainsOfTableFamily(t.Family)
	if err != nil {
		return nil, true, fmt.Errorf("list nftables chains: %w", err)
	}
	if !slices.ContainsFunc(cs, func(x *nftables.Chain) bool { return x.Table.Name == t.Name && x.Name == c.Name }) {
		return nil, true, nil
	}
	rs, err := f.c.GetRules(t, c)
	if err != nil {
		return nil, true, fmt.Errorf("list rules of table %s chain %s: %w", t.Name, c.Name, err)
	}
	return rs, true, nil
}

func ruleTag(r *nftables.Rule) string {
	s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
	return s
}

func (f *nftFilter) set(k ruleKind, vip netip.Addr, rules [][]expr.Any) error {
	nftMu.Lock()
	defer nftMu.Unlock()
	t, c := tableOf(k)
	old, _, err := f.rules(t, c)
	if err != nil {
		return err
	}
	tag := k.tag(vip)
	// One transaction: the table and chain (created if missing), the old
	// rules of vip out and the new ones in.
	f.c.AddTable(t)
	f.c.AddChain(c)
	for _, r := range old {
		if ruleTag(r) == tag {
			if err := f.c.DelRule(&nftables.Rule{Table: t, Chain: c, Handle: r.Handle}); err != nil {
				return err
			}
		}
	}
	ud := userdata.AppendString(nil, userdata.TypeComment, tag)
	for _, exprs := range rules {
		f.c.AddRule(&nftables.Rule{Table: t, Chain: c, Exprs: exprs, UserData: ud})
	}
	if err := f.c.Flush(); err != nil {
		return fmt.Errorf("nftables: install %s rules in table %s: %w", k, t.Name, err)
	}
	return nil
}

func (f *nftFilter) del(k ruleKind, vip netip.Addr) error {
	nftMu.Lock()
	defer nftMu.Unlock()
	t, c := tableOf(k)
	rs, exists, err := f.rules(t, c)
	if err != nil || !exists {
		return err
	}
	tag := k.tag(vip)
	var mine, others int
	for _, r := range rs {
		if ruleTag(r) != tag {
			others++
			continue
		}
		mine++
		if err := f.c.DelRule(&nftables.Rule{Table: t, Chain: c, Handle: r.Handle}); err != nil {
			return err
		}
	}
	switch {
	case others == 0:
		// vipd's table holds nothing else: remove it with its chain.
		f.c.DelTable(t)
	case mine == 0:
		return nil
	}
	if err := f.c.Flush(); err != nil {
		return fmt.Errorf("nftables: remove %s rules from table %s: %w", k, t.Name, err)
	}
	return nil
}

func (f *nftFilter) close() error {
	return f.c.CloseLasting()
}

// CleanupNftables removes the nftables tables vipd installs for
// daisy-chaining (ForwardTable, QuiesceTable, LingerARPTable), with all their rules, in
// the calling thread's network namespace, and returns the names of those
// it removed. `vipd cleanup` and vipd's start call it, so that a vipd
// that ended in the middle of a handoff leaves the host neither forwarding
// nor deaf to ARP. Absent tables are not an error.
func CleanupNftables() ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	nftMu.Lock()
	defer nftMu.Unlock()
	var removed []string
	var errs []error
	for _, k := range []ruleKind{kindForward, kindQuiesce, kindLingerARP} {
		t, _ := tableOf(k)
		ts, err := c.ListTablesOfFamily(t.Family)
		if err != nil {
			errs = append(errs, fmt.Errorf("nftables: list tables: %w", err))
			continue
		}
		for _, x := range ts {
			if x.Name == t.Name {
				c.DelTable(t)
				if err := c.Flush(); err != nil {
					errs = append(errs, fmt.Errorf("nftables: remove table %s: %w", t.Name, err))
				} else {
					removed = append(removed, t.Name)
				}
			}
		}
	}
	return removed, errors.Join(errs...)
}
