package network

// The daemon's nftables table (inet family, one per network name):
//
//	input    from a sandbox: tine's resolver (and proxy) on the gateway,
//	         replies to what the host opened; everything else refused
//	         (the host itself is unreachable)
//	forward  from a sandbox: jump to its own chain through a verdict map
//	         keyed by the host-side veth (so a forged source address does
//	         not pick another sandbox's policy); to a sandbox: replies only
//	postnat  masquerade the pool out of every other interface
//
// A sandbox's chain s<N> checks every packet it sends (stateless, so a
// live policy change also stops connections already open): its source
// address, the deny ranges, the explicit allow ranges, the always-refused
// ranges, then either accept (an open policy) or the sets a<N> (addresses
// its resolver answered, any port) and p<N>_<port> (for rules with a port).
//
// A daemon killed -9 leaves the table (google/nftables cannot set the
// owner flag that would have the kernel drop it with the socket); the next
// daemon of the name deletes it at start (Manager.Reap).

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

type nftTable struct {
	conn    *nftables.Conn
	table   *nftables.Table
	prefix  string // every host-side veth's name starts with it
	vmap    *nftables.Set
	refused *nftables.Set // the always-refused ranges, an interval set
	fwd     *nftables.Chain
}

// reapTable deletes a table named name left by a dead daemon.
func reapTable(name string) (found bool, err error) {
	c, err := nftables.New()
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	t, err := c.ListTableOfFamily(name, nftables.TableFamilyINet)
	if err != nil || t == nil {
		return false, nil // none
	}
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return true, fmt.Errorf("nftables: delete table inet %s: %w", name, err)
	}
	return true, nil
}

// newNFTTable creates the daemon's table: gw is the resolver's address,
// pool the sandboxes' addresses, tcpPorts more ports the sandboxes may
// reach on gw (the proxy's), refused the ranges no sandbox reaches unless
// a rule names them.
func newNFTTable(name, prefix string, gw netip.Addr, pool netip.Prefix, tcpPorts []uint16, refused []netip.Prefix) (*nftTable, error) {
	c, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	t := &nftTable{conn: c, prefix: prefix}
	t.table = c.AddTable(&nftables.Table{Name: name, Family: nftables.TableFamilyINet})
	accept := nftables.ChainPolicyAccept

	in := c.AddChain(&nftables.Chain{Name: "input", Table: t.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	fromSandbox := ifPrefix(expr.MetaKeyIIFNAME, prefix)
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		c.AddRule(&nftables.Rule{Table: t.table, Chain: in, Exprs: cat(fromSandbox, daddrIs(gw), l4port(proto, 53), verdict(expr.VerdictAccept))})
	}
	for _, p := range tcpPorts {
		c.AddRule(&nftables.Rule{Table: t.table, Chain: in, Exprs: cat(fromSandbox, daddrIs(gw), l4port(unix.IPPROTO_TCP, p), verdict(expr.VerdictAccept))})
	}
	c.AddRule(&nftables.Rule{Table: t.table, Chain: in, Exprs: cat(fromSandbox, ctReply(), verdict(expr.VerdictAccept))})
	addReject(c, t.table, in, fromSandbox)

	t.fwd = c.AddChain(&nftables.Chain{Name: "forward", Table: t.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	t.refused = &nftables.Set{Table: t.table, Name: "refused", KeyType: nftables.TypeIPAddr, Interval: true}
	if err := c.AddSet(t.refused, intervalElements(refused)); err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	t.vmap = &nftables.Set{Table: t.table, Name: "sandboxes", KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict, IsMap: true}
	if err := c.AddSet(t.vmap, nil); err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	c.AddRule(&nftables.Rule{Table: t.table, Chain: t.fwd, Exprs: cat(fromSandbox,
		[]expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Lookup{SourceRegister: 1, SetName: t.vmap.Name, SetID: t.vmap.ID, IsDestRegSet: true, DestRegister: 0}})})
	addReject(c, t.table, t.fwd, fromSandbox) // a veth with no sandbox behind it
	toSandbox := ifPrefix(expr.MetaKeyOIFNAME, prefix)
	c.AddRule(&nftables.Rule{Table: t.table, Chain: t.fwd, Exprs: cat(toSandbox, ctReply(), verdict(expr.VerdictAccept))})
	addReject(c, t.table, t.fwd, toSandbox) // nothing beyond the host opens a connection in

	nat := c.AddChain(&nftables.Chain{Name: "postnat", Table: t.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	notToSandbox := []expr.Any{&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(prefix)}}
	c.AddRule(&nftables.Rule{Table: t.table, Chain: nat, Exprs: cat(saddrIn(pool), notToSandbox, []expr.Any{&expr.Masq{}})})
	if err := c.Flush(); err != nil {
		c.CloseLasting()
		return nil, fmt.Errorf("nftables: create table inet %s: %w", name, err)
	}
	return t, nil
}

// close deletes the table (closing the owning socket would too).
func (t *nftTable) close() {
	t.conn.DelTable(t.table)
	t.conn.Flush()
	t.conn.CloseLasting()
}

// sandboxRules are one sandbox's chain and sets.
type sandboxRules struct {
	n      int
	ifname string
	addr   netip.Addr
	chain  *nftables.Chain
	any    *nftables.Set
	ports  map[uint16]*nftables.Set
}

// addSandbox creates sandbox n's chain and sets for policy p and maps its
// veth to them.
func (t *nftTable) addSandbox(n int, ifname string, addr netip.Addr, p Policy) (*sandboxRules, error) {
	sr := &sandboxRules{n: n, ifname: ifname, addr: addr}
	sr.chain = t.conn.AddChain(&nftables.Chain{Name: "s" + strconv.Itoa(n), Table: t.table})
	if err := t.fillSandbox(sr, p); err != nil {
		return nil, err
	}
	if err := t.conn.SetAddElements(t.vmap, []nftables.SetElement{{Key: ifnameKey(ifname), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: sr.chain.Name}}}); err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	if err := t.conn.Flush(); err != nil {
		return nil, fmt.Errorf("nftables: add sandbox chain: %w", err)
	}
	return sr, nil
}

// setPolicy replaces the sandbox's rules and sets in one transaction; the
// caller refills the sets.
func (t *nftTable) setPolicy(sr *sandboxRules, p Policy) error {
	t.conn.FlushChain(sr.chain)
	t.delSets(sr)
	if err := t.fillSandbox(sr, p); err != nil {
		return err
	}
	if err := t.conn.Flush(); err != nil {
		return fmt.Errorf("nftables: replace sandbox policy: %w", err)
	}
	return nil
}

func (t *nftTable) delSets(sr *sandboxRules) {
	if sr.any != nil {
		t.conn.DelSet(sr.any)
	}
	for _, s := range sr.ports {
		t.conn.DelSet(s)
	}
	sr.any, sr.ports = nil, nil
}

// removeSandbox deletes the sandbox's map entry, chain and sets.
func (t *nftTable) removeSandbox(sr *sandboxRules) error {
	if err := t.conn.SetDeleteElements(t.vmap, []nftables.SetElement{{Key: ifnameKey(sr.ifname), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: sr.chain.Name}}}); err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t.conn.FlushChain(sr.chain)
	t.conn.DelChain(sr.chain)
	t.delSets(sr)
	if err := t.conn.Flush(); err != nil {
		return fmt.Errorf("nftables: remove sandbox chain: %w", err)
	}
	return nil
}

// fillSandbox queues the sets and rules of policy p (see the file's
// comment for their order).
func (t *nftTable) fillSandbox(sr *sandboxRules, p Policy) error {
	c, tb, ch := t.conn, t.table, sr.chain
	add := func(e ...[]expr.Any) { c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: cat(e...)}) }
	add(notIPv4(), verdict(expr.VerdictDrop))
	add([]expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: sr.addr.AsSlice()}}, verdict(expr.VerdictDrop))
	for _, r := range p.Deny {
		switch {
		case r.IsName():
		case r.Port == 0:
			rejectIf(add, daddrIn(r.Net)...)
		default:
			for _, proto := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
				rejectIf(add, cat(daddrIn(r.Net), l4port(proto, r.Port))...)
			}
		}
	}
	for _, r := range p.Allow {
		if !r.IsName() {
			if r.Port == 0 {
				add(daddrIn(r.Net), verdict(expr.VerdictAccept))
			} else {
				for _, proto := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
					add(daddrIn(r.Net), l4port(proto, r.Port), verdict(expr.VerdictAccept))
				}
			}
		}
	}
	rejectIf(add, daddrInSet(t.refused)...)
	if p.Open() {
		add(verdict(expr.VerdictAccept))
		return nil
	}
	newSet := func(name string) (*nftables.Set, error) {
		s := &nftables.Set{Table: tb, Name: name, KeyType: nftables.TypeIPAddr}
		if err := c.AddSet(s, nil); err != nil {
			return nil, fmt.Errorf("nftables: %w", err)
		}
		return s, nil
	}
	var err error
	if sr.any, err = newSet("a" + strconv.Itoa(sr.n)); err != nil {
		return err
	}
	add(daddrInSet(sr.any), verdict(expr.VerdictAccept))
	sr.ports = map[uint16]*nftables.Set{}
	for _, port := range p.namePorts() {
		s, err := newSet("p" + strconv.Itoa(sr.n) + "_" + strconv.Itoa(int(port)))
		if err != nil {
			return err
		}
		sr.ports[port] = s
		for _, proto := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
			add(l4port(proto, port), daddrInSet(s), verdict(expr.VerdictAccept))
		}
	}
	rejectIf(add)
	return nil
}

// allowAddrs adds addresses the resolver answered to the sandbox's sets:
// to the any-port set, or to the sets of the given ports.
func (t *nftTable) allowAddrs(sr *sandboxRules, addrs []netip.Addr, anyPort bool, ports []uint16) error {
	if sr.any == nil || len(addrs) == 0 {
		return nil // an open policy has no sets
	}
	elems := make([]nftables.SetElement, len(addrs))
	for i, a := range addrs {
		elems[i] = nftables.SetElement{Key: a.AsSlice()}
	}
	if anyPort {
		if err := t.conn.SetAddElements(sr.any, elems); err != nil {
			return err
		}
	}
	for _, p := range ports {
		if s := sr.ports[p]; s != nil {
			if err := t.conn.SetAddElements(s, elems); err != nil {
				return err
			}
		}
	}
	if err := t.conn.Flush(); err != nil {
		return fmt.Errorf("nftables: add resolved addresses: %w", err)
	}
	return nil
}

// intervalElements are the prefixes as an interval set's elements: each
// range's start and the end (exclusive) as an interval end, overlapping
// and adjacent ranges merged (the kernel refuses overlaps).
func intervalElements(prefixes []netip.Prefix) []nftables.SetElement {
	type span struct{ lo, hi uint64 } // hi exclusive; up to 1<<32
	var spans []span
	for _, p := range prefixes {
		p = p.Masked()
		lo := uint64(binary.BigEndian.Uint32(p.Addr().AsSlice()))
		spans = append(spans, span{lo, lo + 1<<(32-p.Bits())})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	var merged []span
	for _, s := range spans {
		if k := len(merged); k > 0 && s.lo <= merged[k-1].hi {
			merged[k-1].hi = max(merged[k-1].hi, s.hi)
			continue
		}
		merged = append(merged, s)
	}
	var elems []nftables.SetElement
	for _, s := range merged {
		elems = append(elems, nftables.SetElement{Key: binary.BigEndian.AppendUint32(nil, uint32(s.lo))})
		if s.hi < 1<<32 {
			elems = append(elems, nftables.SetElement{Key: binary.BigEndian.AppendUint32(nil, uint32(s.hi)), IntervalEnd: true})
		}
	}
	return elems
}

// The expressions the rules are made of.

func cat(parts ...[]expr.Any) []expr.Any {
	var all []expr.Any
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

// ifPrefix matches an interface name starting with prefix (a compare of
// fewer bytes than the name register holds).
func ifPrefix(key expr.MetaKey, prefix string) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(prefix)}}
}

func ifnameKey(name string) []byte {
	b := make([]byte, 16)
	copy(b, name)
	return b
}

func notIPv4() []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}}}
}

func isIPv4() []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}}}
}

func addrIn(offset uint32, p netip.Prefix) []expr.Any {
	mask := make([]byte, 4)
	binary.BigEndian.PutUint32(mask, ^uint32(0)<<(32-p.Bits()))
	if p.Bits() == 0 {
		mask = []byte{0, 0, 0, 0}
	}
	return cat(isIPv4(), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()},
	})
}

func daddrIn(p netip.Prefix) []expr.Any { return addrIn(16, p) }
func saddrIn(p netip.Prefix) []expr.Any { return addrIn(12, p) }
func daddrIs(a netip.Addr) []expr.Any   { return daddrIn(netip.PrefixFrom(a, 32)) }

func daddrInSet(s *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
	}
}

// l4port matches protocol proto to destination port.
func l4port(proto byte, port uint16) []expr.Any {
	p := make([]byte, 2)
	binary.BigEndian.PutUint16(p, port)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p},
	}
}

// ctReply matches packets of connections already established (the other
// side opened them, or they are related ICMP).
func ctReply() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

// rejectIf adds the rules that refuse what match matches: a TCP reset
// for TCP, an ICMP "administratively prohibited" for the rest, so a
// refused connection fails at once instead of timing out.
func rejectIf(add func(...[]expr.Any), match ...expr.Any) {
	tcp := []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}}}
	add(match, tcp, []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}})
	add(match, []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}})
}

func addReject(c *nftables.Conn, t *nftables.Table, ch *nftables.Chain, match []expr.Any) {
	rejectIf(func(e ...[]expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: cat(e...)}) }, match...)
}
