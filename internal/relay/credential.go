package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/relayproto"
)

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
		return -1, fmt.Errorf("%w: credential length %d", relayproto.ErrCredential, len(cred))
	}
	d, err := v.Munger.Decode(ctx, cred)
	if err != nil {
		return -1, fmt.Errorf("%w: %w", relayproto.ErrCredential, err)
	}
	if d.RestrictUID != v.UID {
		return -1, fmt.Errorf("%w: restricted to uid %d, want the relay's %d (auth.NoRestriction %d: none)", relayproto.ErrCredential, d.RestrictUID, v.UID, auth.NoRestriction)
	}
	var c relayproto.Claims
	if err := relayproto.DecodeStrict(d.Payload, &c); err != nil {
		return -1, fmt.Errorf("%w: claims: %w", relayproto.ErrCredential, err)
	}
	switch {
	case c.V != 1:
		return -1, fmt.Errorf("%w: claims version %d", relayproto.ErrCredential, c.V)
	case c.Purpose != relayproto.Purpose:
		return -1, fmt.Errorf("%w: claims purpose %q, want %q", relayproto.ErrCredential, c.Purpose, relayproto.Purpose)
	case c.Cluster != v.Cluster:
		return -1, fmt.Errorf("%w: claims cluster %q, want %q", relayproto.ErrCredential, c.Cluster, v.Cluster)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	maxAge := v.MaxAge
	if maxAge <= 0 {
		maxAge = 2 * relayproto.CredentialTTL
	}
	if age := now().Sub(time.UnixMilli(c.IssuedMS)); age > maxAge || age < -maxAge {
		return -1, fmt.Errorf("%w: issued %s ago, limit %s", relayproto.ErrCredential, age.Round(time.Second), maxAge)
	}
	if d.UID < 0 {
		return -1, fmt.Errorf("%w: no uid", relayproto.ErrCredential)
	}
	return d.UID, nil
}
