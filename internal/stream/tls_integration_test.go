//go:build integration

package stream_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/stream"
)

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a server certificate for the given names and IPs, and its key.
func (ca testCA) issue(t *testing.T, dir, base string, dns []string, ips []net.IP) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: base},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: dns, IPAddresses: ips,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, base+".crt"), filepath.Join(dir, base+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o644); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestTLSOnRealRedis runs a redis-server of its own with TLS only (port 0,
// tls-port) and an ACL user, as docs/deployment.md configures it: the
// client with ISCHED_REDIS_CA connects and appends; a client trusting
// another CA, a plaintext client, and a server whose certificate names
// another host are all refused.
func TestTLSOnRealRedis(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is needed (make deps installs it): %v", err)
	}
	dir := t.TempDir()
	ca, other := newCA(t, "isched test CA"), newCA(t, "another CA")
	caFile, otherFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "other.pem")
	_ = os.WriteFile(caFile, ca.pem, 0o644)
	_ = os.WriteFile(otherFile, other.pem, 0o644)
	good, goodKey := ca.issue(t, dir, "redis", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	wrongName, wrongKey := ca.issue(t, dir, "elsewhere", []string{"redis.elsewhere.invalid"}, nil)

	pass := "tls-test-password"
	passFile := filepath.Join(dir, "reporter.pass")
	_ = os.WriteFile(passFile, []byte(pass+"\n"), 0o600)
	acl := filepath.Join(dir, "users.acl")
	_ = os.WriteFile(acl, []byte("user default off resetkeys -@all\nuser reporter on >"+pass+" resetchannels ~isched:* +@all\n"), 0o600)

	serve := func(name, cert, key string) int {
		port := freePort(t)
		cmd := exec.Command(bin, "--port", "0", "--tls-port", fmt.Sprint(port), "--bind", "127.0.0.1",
			"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no",
			"--tls-protocols", "TLSv1.2 TLSv1.3", "--aclfile", acl, "--save", "", "--appendonly", "no", "--dir", dir,
			"--logfile", filepath.Join(dir, name+".log"))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
		return port
	}
	port := serve("redis", good, goodKey)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// another server, presenting a certificate (from the right CA) for
	// another host
	elsewhere := fmt.Sprintf("127.0.0.1:%d", serve("elsewhere", wrongName, wrongKey))

	open := func(addr, ca string) (*stream.Client, error) {
		env := map[string]string{"ISCHED_REDIS_ADDR": addr, "ISCHED_REDIS_PASSWORD_FILE": passFile, "ISCHED_REDIS_CA": ca, "ISCHED_CLUSTER": "tlstest"}
		cfg, err := stream.ConfigFromEnv(func(k string) string { return env[k] }, "reporter")
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return stream.Open(ctx, cfg)
	}
	var c *stream.Client
	deadline := time.Now().Add(10 * time.Second)
	for c, err = open(addr, caFile); err != nil; c, err = open(addr, caFile) {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("TLS client with the right CA: %v\nredis log:\n%s", err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := c.Append(context.Background(), c.Keys().Ingest(), []byte(`{"v":1}`), "mac", 100); err != nil {
		t.Errorf("append over TLS: %v", err)
	}
	c.Close()
	if c, err := open(fmt.Sprintf("localhost:%d", port), caFile); err != nil {
		t.Errorf("by host name localhost: %v", err)
	} else {
		c.Close()
	}

	if c, err := open(addr, otherFile); err == nil {
		c.Close()
		t.Error("a client trusting another CA connected")
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("another CA: refused, but not for the certificate: %v", err)
	}
	if c, err := open(addr, ""); err == nil {
		c.Close()
		t.Error("a plaintext client connected to the TLS port")
	}

	// wait until the other server listens (a refused dial is not the point)
	deadline = time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("tcp", elsewhere)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second redis-server: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if c, err := open(elsewhere, caFile); err == nil {
		c.Close()
		t.Error("connected to a server whose certificate names another host")
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("wrong host name: refused, but not for the certificate: %v", err)
	}
}
