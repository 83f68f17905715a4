package natsconf_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/salvagehq/salvage/natsconf"
)

// pki is a throwaway CA with a server certificate for 127.0.0.1 and a
// client certificate, written as PEM files.
type pki struct {
	ca                    *x509.Certificate
	caKey                 *ecdsa.PrivateKey
	caFile                string
	server                tls.Certificate
	clientCert, clientKey string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	p := &pki{}
	var err error
	p.caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "salvage test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", der)
	sDER, sKey := p.issue(t, 2, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	p.server = tls.Certificate{Certificate: [][]byte{sDER}, PrivateKey: sKey}
	cDER, cKey := p.issue(t, 3, "worker", x509.ExtKeyUsageClientAuth)
	p.clientCert = writePEM(t, dir, "client.pem", "CERTIFICATE", cDER)
	keyDER, err := x509.MarshalECPrivateKey(cKey)
	if err != nil {
		t.Fatal(err)
	}
	p.clientKey = writePEM(t, dir, "client-key.pem", "EC PRIVATE KEY", keyDER)
	return p
}

func (p *pki) issue(t *testing.T, serial int64, name string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func writePEM(t *testing.T, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTLS: a client with the CA connects over TLS; one without it fails
// at once with the certificate error, not a hang; with mutual TLS a
// client certificate is required.
func TestTLS(t *testing.T) {
	p := newPKI(t)
	start := func(mutual bool) string {
		t.Helper()
		cfg := &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}
		if mutual {
			cfg.ClientCAs = x509.NewCertPool()
			cfg.ClientCAs.AddCert(p.ca)
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
		sc := natsconf.DefaultServerConfig()
		sc.Port, sc.StoreDir, sc.TLS = -1, t.TempDir(), cfg
		srv, err := natsconf.StartServer(sc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		return strings.Replace(srv.ClientURL(), "nats://", "tls://", 1)
	}
	// A client that does not wait for a server (ConnectConfig.Wait) tries
	// once: a failure that names the certificate is the handshake's, not a
	// timeout's, however long the machine took.
	connect := func(c natsconf.ConnectConfig) error {
		t.Helper()
		nc, err := natsconf.Connect(c)
		if err == nil {
			if !nc.TLSRequired() {
				t.Error("connected without TLS")
			}
			nc.Close()
		}
		return err
	}

	url := start(false)
	if err := connect(natsconf.ConnectConfig{URL: url, TLSCA: p.caFile}); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	err := connect(natsconf.ConnectConfig{URL: url})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v; want a certificate error", err)
	}
	t.Logf("without the CA: %v", err)

	url = start(true)
	if err := connect(natsconf.ConnectConfig{URL: url, TLSCA: p.caFile, TLSCert: p.clientCert, TLSKey: p.clientKey}); err != nil {
		t.Fatalf("mutual TLS with a client certificate: %v", err)
	}
	if err := connect(natsconf.ConnectConfig{URL: url, TLSCA: p.caFile}); err == nil {
		t.Fatal("mutual TLS without a client certificate connected")
	} else {
		t.Logf("mutual TLS without a client certificate: %v", err)
	}
}
