package relay

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestDiagPeersFindsTheClientsOwner: the kernel names the owner of the
// client's socket of a loopback connection (this test's uid; nobody's
// when the test can run a client as nobody), and nobody for a port no one
// uses.
func TestDiagPeersFindsTheClientsOwner(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			host := map[string]string{"tcp4": "127.0.0.1", "tcp6": "::1"}[network]
			ln, err := net.Listen(network, net.JoinHostPort(host, "0"))
			if err != nil && network == "tcp6" {
				// a host or container may run without IPv6
				t.Skipf("no %s loopback: %v", network, err)
			}
			if err != nil {
				t.Fatalf("no %s loopback: %v", network, err) // every Linux has 127.0.0.1
			}
			defer ln.Close()
			c, err := net.Dial(network, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			assertPeer(t, ln, os.Getuid())
			if os.Getuid() != 0 {
				return
			}
			const py = "/usr/bin/python3" // nobody's to run, unlike a python in root's home
			if _, err := os.Stat(py); err != nil {
				return
			}
			if _, err := exec.LookPath("runuser"); err != nil {
				return
			}
			// a client of another user: it holds its socket until its stdin closes
			var errb bytes.Buffer
			cmd := exec.Command("runuser", "-u", "nobody", "--", py, "-c",
				"import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2]))); sys.stdin.read()", host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
			cmd.Stderr = &errb
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = stdin.Close()
				if err := cmd.Wait(); err != nil {
					t.Errorf("client as nobody: %v: %s", err, errb.String())
				}
			}()
			assertPeer(t, ln, 65534)
		})
	}
}

// assertPeer accepts one connection on ln and checks its client's uid.
func assertPeer(t *testing.T, ln net.Listener, want int) {
	t.Helper()
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second)) // a client that failed to start
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	local, remote := s.LocalAddr().(*net.TCPAddr).AddrPort(), s.RemoteAddr().(*net.TCPAddr).AddrPort()
	if uid, ok := (diagPeers{}).PeerUID(local, remote); !ok || uid != want {
		t.Errorf("PeerUID: %d %v, want %d", uid, ok, want)
	}
	if uid, ok := (diagPeers{}).PeerUID(local, netip.AddrPortFrom(remote.Addr(), 1)); ok {
		t.Errorf("PeerUID of a port no one uses: %d", uid)
	}
}

// BenchmarkDiagPeerUID: one lookup with 1 000 other loopback connections
// open (2 000 sockets), the cost a local client's connection adds.
func BenchmarkDiagPeerUID(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	var last net.Conn
	for range 1000 {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		last = s
	}
	local, remote := last.LocalAddr().(*net.TCPAddr).AddrPort(), last.RemoteAddr().(*net.TCPAddr).AddrPort()
	for b.Loop() {
		if uid, ok := (diagPeers{}).PeerUID(local, remote); !ok || uid != os.Getuid() {
			b.Fatal("not found", uid)
		}
	}
}
