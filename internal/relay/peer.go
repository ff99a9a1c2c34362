package relay

import (
	"net"
	"net/netip"
	"strconv"
)

// peerUIDs finds who owns the client's end of a TCP connection from this
// host. All local users connect from 127.0.0.1 (or the host's own
// address), so per address the relay cannot tell bob from alice there;
// the kernel can (diagPeers on Linux).
type peerUIDs interface {
	PeerUID(local, remote netip.AddrPort) (uid int, ok bool)
}

func unmap(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }

// sourceOf is whom an unauthenticated connection counts against: on this
// host, the uid that owns the client's socket when peers can tell;
// otherwise its address (the remote IP; the whole address for other
// kinds of connection).
func sourceOf(nc net.Conn, peers peerUIDs) string {
	remote, rok := nc.RemoteAddr().(*net.TCPAddr)
	local, lok := nc.LocalAddr().(*net.TCPAddr)
	if !rok || !lok {
		return "addr " + nc.RemoteAddr().String()
	}
	r, l := unmap(remote.AddrPort()), unmap(local.AddrPort())
	if peers != nil && (r.Addr().IsLoopback() || r.Addr() == l.Addr()) {
		if uid, ok := peers.PeerUID(l, r); ok {
			return "local uid " + strconv.Itoa(uid)
		}
	}
	return "ip " + r.Addr().String()
}
