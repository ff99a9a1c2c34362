package relay

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"time"
)

// diagPeers asks the kernel (sock_diag netlink, as ss(8) does) for the one
// socket whose local address is the connection's remote one and whose
// remote address is the relay's: the client's. Its uid is the socket's
// owner, fixed when it was created: bob cannot make one that is alice's.
// One exact lookup (~20 µs), however many sockets the host has: reading
// /proc/net/tcp instead cost ~15 ms with 2 000 sockets, too much to do
// per connection. Not found (another network namespace, a client gone
// already, sock_diag not allowed): ok false, and the connection counts by
// its address.
type diagPeers struct{}

func defaultPeers() peerUIDs { return diagPeers{} }

const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	netlinkSockDiag  = 4  // NETLINK_SOCK_DIAG
	diagReqLen       = 16 + 56
	diagUIDOffset    = 16 + 4 + 48 + 12 // nlmsghdr, then inet_diag_msg's family..retrans, id, expires, queues
)

// PeerUID implements peerUIDs.
func (diagPeers) PeerUID(local, remote netip.AddrPort) (int, bool) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, netlinkSockDiag)
	if err != nil {
		return -1, false
	}
	defer syscall.Close(fd)
	tv := syscall.NsecToTimeval(int64(time.Second))
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	local, remote = unmap(local), unmap(remote)
	for _, fam := range families(local, remote) {
		if uid, ok := diagOne(fd, fam, remote, local); ok {
			return uid, true
		}
	}
	return -1, false
}

// families to ask: a v4 client has an AF_INET socket, or an AF_INET6 one
// holding v4-mapped addresses.
func families(local, remote netip.AddrPort) []uint8 {
	if local.Addr().Is4() && remote.Addr().Is4() {
		return []uint8{syscall.AF_INET, syscall.AF_INET6}
	}
	return []uint8{syscall.AF_INET6}
}

// diagOne looks up the TCP socket src→dst of family fam.
func diagOne(fd int, fam uint8, src, dst netip.AddrPort) (int, bool) {
	req := make([]byte, diagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], diagReqLen)
	ne.PutUint16(req[4:], sockDiagByFamily)
	ne.PutUint16(req[6:], syscall.NLM_F_REQUEST)
	// inet_diag_req_v2: family, protocol, ext, pad, states, then the id
	req[16], req[17] = fam, syscall.IPPROTO_TCP
	ne.PutUint32(req[20:], 0xffffffff)
	id := req[24:]
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	copy(id[4:20], diagAddr(fam, src.Addr()))
	copy(id[20:36], diagAddr(fam, dst.Addr()))
	ne.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:], 0xffffffff)
	if err := syscall.Sendto(fd, req, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return -1, false
	}
	buf := make([]byte, 4096)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil || n < diagUIDOffset+4 || ne.Uint16(buf[4:]) != sockDiagByFamily {
		return -1, false // NLMSG_ERROR: no such socket
	}
	return int(ne.Uint32(buf[diagUIDOffset:])), true
}

// diagAddr is a in the id's 16 bytes: v4 in the first 4 for AF_INET,
// v4-mapped for AF_INET6.
func diagAddr(fam uint8, a netip.Addr) []byte {
	if fam == syscall.AF_INET {
		b := a.As4()
		return b[:]
	}
	b := a.As16()
	return b[:]
}
