package probe

import (
	"fmt"
	"os"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/tine-run/tine/internal/kernel/osthread"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// inThrowawayNetNS runs fn in a network namespace made for it and gone
// after, so a probe of the network stack changes nothing on the host.
func inThrowawayNetNS(fn func() error) (err error) {
	osthread.Throwaway(func() {
		if err = unix.Unshare(unix.CLONE_NEWNET); err != nil {
			err = fmt.Errorf("create a network namespace: %w", err)
			return
		}
		err = fn()
	})
	return err
}

// checkNFTables creates an inet table with a NAT chain that masquerades
// and a filter chain that rejects: what egress sandboxes' rules use.
func checkNFTables() Check {
	if os.Geteuid() != 0 {
		return Check{Detail: "needs root", Fix: "run tine as root"}
	}
	err := inThrowawayNetNS(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		t := c.AddTable(&nftables.Table{Name: "probe", Family: nftables.TableFamilyINet})
		nat := c.AddChain(&nftables.Chain{Name: "nat", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
		c.AddRule(&nftables.Rule{Table: t, Chain: nat, Exprs: []expr.Any{&expr.Masq{}}})
		f := c.AddChain(&nftables.Chain{Name: "fwd", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
		c.AddRule(&nftables.Rule{Table: t, Chain: f, Exprs: []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}}})
		return c.Flush()
	})
	if err != nil {
		return Check{Detail: "cannot create an nftables table with masquerade and reject: " + err.Error(),
			Fix: "a kernel with CONFIG_NF_TABLES, CONFIG_NF_TABLES_INET, CONFIG_NFT_MASQ, CONFIG_NFT_NAT and CONFIG_NFT_REJECT (as modules: modprobe nf_tables nft_masq nft_nat nft_reject_inet)"}
	}
	return Check{OK: true, Detail: "created an inet table with masquerade and reject in a throwaway namespace"}
}

// checkVeth creates a veth pair in a throwaway namespace.
func checkVeth() Check {
	if os.Geteuid() != 0 {
		return Check{Detail: "needs root", Fix: "run tine as root"}
	}
	err := inThrowawayNetNS(func() error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "probe0"}, PeerName: "probe1"})
	})
	if err != nil {
		return Check{Detail: "cannot create a veth pair: " + err.Error(), Fix: "a kernel with CONFIG_VETH (as a module: modprobe veth)"}
	}
	return Check{OK: true, Detail: "created a veth pair in a throwaway namespace"}
}

// checkIPForward reads net.ipv4.ip_forward, which egress needs; the daemon
// turns it on at its first egress sandbox, so off is only a warning of
// what will change.
func checkIPForward() Check {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err != nil {
		return Check{Detail: err.Error(), Fix: "a kernel with IPv4 networking"}
	}
	if strings.TrimSpace(string(b)) != "1" {
		if os.Geteuid() == 0 {
			return Check{OK: true, Detail: "net.ipv4.ip_forward is 0; tine serve (root) turns it on at the first egress sandbox"}
		}
		return Check{Detail: "net.ipv4.ip_forward is 0, and only root can turn it on",
			Fix: "sysctl -w net.ipv4.ip_forward=1, or run tine serve as root"}
	}
	return Check{OK: true, Detail: "net.ipv4.ip_forward is 1"}
}
