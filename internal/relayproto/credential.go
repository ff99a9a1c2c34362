package relayproto

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
