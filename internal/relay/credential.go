package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/isched/isched/internal/auth"
)

// Purpose marks a credential made for the relay: a report's start
// credential (auth.Claims) has other fields and is refused.
const Purpose = "isched-relay"

// Claims is what a relay credential says. The uid is not among them:
// MUNGE stamps it.
type Claims struct {
	V        int    `json:"v"`
	Purpose  string `json:"purpose"`
	Cluster  string `json:"cluster"`
	IssuedMS int64  `json:"issued_ms"`
}

// CredentialTTL is how long MUNGE keeps a relay credential valid: it is
// used at once, for one connection.
const CredentialTTL = 60 * time.Second

// Credential makes a MUNGE credential for a connection to the relay of
// cluster, restricted to the relay's uid.
func Credential(ctx context.Context, m auth.Munger, cluster string, relayUID int, now time.Time) (string, error) {
	b, err := json.Marshal(Claims{V: 1, Purpose: Purpose, Cluster: cluster, IssuedMS: now.UnixMilli()})
	if err != nil {
		return "", fmt.Errorf("relay: encode claims: %w", err)
	}
	cred, err := m.Encode(ctx, b, relayUID, CredentialTTL)
	if err != nil {
		return "", fmt.Errorf("relay: munge: %w", err)
	}
	return cred, nil
}

// ErrCredential: a connection's credential was refused.
var ErrCredential = errors.New("relay: credential refused")

// Verifier learns a connection's uid from its credential.
type Verifier interface {
	Verify(ctx context.Context, cred string) (uid int, err error)
}

// MungeVerifier opens relay credentials with MUNGE: the uid is MUNGE's,
// never the client's. It refuses a credential opened before (MUNGE's
// replay check), one not restricted to UID (the relay's own), one of
// another cluster or purpose, and one issued more than MaxAge ago.
type MungeVerifier struct {
	Munger  auth.Munger
	UID     int
	Cluster string
	MaxAge  time.Duration
	Now     func() time.Time
}

// Verify implements Verifier.
func (v MungeVerifier) Verify(ctx context.Context, cred string) (int, error) {
	if len(cred) == 0 || len(cred) > 8<<10 {
		return -1, fmt.Errorf("%w: credential length %d", ErrCredential, len(cred))
	}
	d, err := v.Munger.Decode(ctx, cred)
	if err != nil {
		return -1, fmt.Errorf("%w: %w", ErrCredential, err)
	}
	if d.RestrictUID != v.UID {
		return -1, fmt.Errorf("%w: restricted to uid %d, want the relay's %d (auth.NoRestriction %d: none)", ErrCredential, d.RestrictUID, v.UID, auth.NoRestriction)
	}
	var c Claims
	if err := decodeStrict(d.Payload, &c); err != nil {
		return -1, fmt.Errorf("%w: claims: %w", ErrCredential, err)
	}
	switch {
	case c.V != 1:
		return -1, fmt.Errorf("%w: claims version %d", ErrCredential, c.V)
	case c.Purpose != Purpose:
		return -1, fmt.Errorf("%w: claims purpose %q, want %q", ErrCredential, c.Purpose, Purpose)
	case c.Cluster != v.Cluster:
		return -1, fmt.Errorf("%w: claims cluster %q, want %q", ErrCredential, c.Cluster, v.Cluster)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	maxAge := v.MaxAge
	if maxAge <= 0 {
		maxAge = 2 * CredentialTTL
	}
	if age := now().Sub(time.UnixMilli(c.IssuedMS)); age > maxAge || age < -maxAge {
		return -1, fmt.Errorf("%w: issued %s ago, limit %s", ErrCredential, age.Round(time.Second), maxAge)
	}
	if d.UID < 0 {
		return -1, fmt.Errorf("%w: no uid", ErrCredential)
	}
	return d.UID, nil
}
