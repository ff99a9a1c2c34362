// Package auth proves who wrote a report.
//
// Every job can append to the ingest stream (the reporter Redis password is
// shared by design), so the stream itself proves nothing. Instead, at start
// the wrapper draws a random 256-bit session key and seals it, with the job
// id, lineage and session id, in a MUNGE credential restricted to the
// coordinator's uid. MUNGE stamps the credential with the uid of the process
// that made it; no user can choose that uid (only root may pass --uid), and
// only the coordinator's uid can open it, so the key stays secret. The
// coordinator checks that uid against the job's owner in the agent's job
// table, keeps the key, and every later message of the session carries an
// HMAC-SHA256 of its exact bytes under that key plus a strictly increasing
// sequence number (replays are rejected by the coordinator). See
// docs/threat-model.md.
package auth

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// KeySize is the session key length in bytes.
const KeySize = 32

var (
	// ErrBadMAC: the message was not signed with the session's key.
	ErrBadMAC = errors.New("auth: message authentication failed")
	// ErrCredential: the MUNGE credential is invalid, expired, replayed or not ours.
	ErrCredential = errors.New("auth: credential rejected")
	// ErrReplayed: MUNGE opened this credential before. A Munger returns it
	// with the payload and ids it still decoded (MUNGE does), so that a
	// caller who knows it is reading the same message again (a stream entry
	// delivered a second time after a crash) can use OpenRedelivered.
	ErrReplayed = errors.New("auth: credential replayed")
	// ErrUnrestricted: the credential is not restricted to the uid that
	// opens it (anybody, or root only because it is root, could open it
	// and read the session key).
	ErrUnrestricted = errors.New("auth: credential not restricted to this uid")
)

// NoRestriction is Decoded.RestrictUID of a credential any uid may decode.
const NoRestriction = -1

// Session is one wrapper run's identity and key.
type Session struct {
	SID string
	Key []byte
}

// NewSession draws a random session id and key.
func NewSession() (Session, error) {
	b := make([]byte, 16+KeySize)
	if _, err := rand.Read(b); err != nil {
		return Session{}, fmt.Errorf("auth: random: %w", err)
	}
	return Session{SID: hex.EncodeToString(b[:16]), Key: b[16:]}, nil
}

// Sign returns the hex HMAC-SHA256 of payload under the session key.
func (s Session) Sign(payload []byte) string { return Sign(s.Key, payload) }

// Sign returns the hex HMAC-SHA256 of payload under key.
func Sign(key, payload []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(payload)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks a hex MAC in constant time.
func Verify(key, payload []byte, mac string) error {
	got, err := hex.DecodeString(mac)
	if err != nil || len(got) != sha256.Size {
		return fmt.Errorf("%w: mac is not %d hex bytes", ErrBadMAC, sha256.Size)
	}
	m := hmac.New(sha256.New, key)
	m.Write(payload)
	if !hmac.Equal(got, m.Sum(nil)) {
		return ErrBadMAC
	}
	return nil
}

// Claims is what a credential binds: this session key belongs to this job.
type Claims struct {
	V        int    `json:"v"`
	SID      string `json:"sid"`
	Cluster  string `json:"cluster"`
	JobID    uint64 `json:"job_id"`
	Lineage  string `json:"lineage"`
	Key      string `json:"key"`
	IssuedMS int64  `json:"issued_ms"`
}

// Verified is an opened credential: the claims and the uid MUNGE vouches for.
type Verified struct {
	Claims
	UID int
	GID int
	// RestrictUID is the only uid (besides root) MUNGE lets decode the
	// credential; NoRestriction: any uid may.
	RestrictUID int
	Key         []byte
}

// RestrictedTo checks that only uid could open the credential: a
// credential anybody may decode (made without --restrict-uid) or
// restricted to another uid (opened here only because uid is root)
// exposes its session key to others, so whoever holds a copy could sign
// reports as the session.
func (v Verified) RestrictedTo(uid int) error {
	if v.RestrictUID == NoRestriction {
		return fmt.Errorf("%w: any uid may decode it (want restricted to uid %d)", ErrUnrestricted, uid)
	}
	if v.RestrictUID != uid {
		return fmt.Errorf("%w: restricted to uid %d, not %d", ErrUnrestricted, v.RestrictUID, uid)
	}
	return nil
}

// Decoded is what MUNGE says of a credential it opened.
type Decoded struct {
	Payload  []byte
	UID, GID int // who made it
	// RestrictUID is the uid the maker restricted decoding to;
	// NoRestriction when none.
	RestrictUID int
}

// Munger is the part of MUNGE used here (the munge/unmunge commands in
// production, a fake in tests).
type Munger interface {
	Encode(ctx context.Context, payload []byte, restrictUID int, ttl time.Duration) (string, error)
	// Decode opens a credential. With ErrReplayed it still returns what
	// MUNGE decoded (the payload non-nil).
	Decode(ctx context.Context, cred string) (Decoded, error)
}

// Issue seals the session in a credential only restrictUID can open.
func Issue(ctx context.Context, m Munger, s Session, cluster string, jobID uint64, lineage string, restrictUID int, ttl time.Duration, now time.Time) (string, error) {
	c := Claims{V: 1, SID: s.SID, Cluster: cluster, JobID: jobID, Lineage: lineage, Key: hex.EncodeToString(s.Key), IssuedMS: now.UnixMilli()}
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("auth: encode claims: %w", err)
	}
	cred, err := m.Encode(ctx, b, restrictUID, ttl)
	if err != nil {
		return "", fmt.Errorf("auth: munge: %w", err)
	}
	return cred, nil
}

var sidRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// Open decodes a credential and checks its claims are well formed. A
// credential MUNGE opened before is refused: a captured start report sent
// again must not open a session.
func Open(ctx context.Context, m Munger, cred string) (Verified, error) {
	return open(ctx, m, cred, false)
}

// OpenRedelivered is Open for a credential whose message the caller has
// read before and may have opened already (the coordinator died between
// opening it and saving the session, and its stream delivers the same
// entry again): MUNGE's replay verdict is accepted, every other check
// stands. Never call it for a message that arrived as new: that is how a
// captured report is replayed.
func OpenRedelivered(ctx context.Context, m Munger, cred string) (Verified, error) {
	return open(ctx, m, cred, true)
}

func open(ctx context.Context, m Munger, cred string, replayOK bool) (Verified, error) {
	if len(cred) == 0 || len(cred) > 8<<10 {
		return Verified{}, fmt.Errorf("%w: credential length %d", ErrCredential, len(cred))
	}
	d, err := m.Decode(ctx, cred)
	payload := d.Payload
	if err != nil && !(replayOK && errors.Is(err, ErrReplayed) && payload != nil) {
		return Verified{}, fmt.Errorf("%w: %w", ErrCredential, err)
	}
	var c Claims
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Verified{}, fmt.Errorf("%w: claims: %w", ErrCredential, err)
	}
	if c.V != 1 {
		return Verified{}, fmt.Errorf("%w: claims version %d", ErrCredential, c.V)
	}
	if !sidRE.MatchString(c.SID) {
		return Verified{}, fmt.Errorf("%w: claims field \"sid\" malformed", ErrCredential)
	}
	if c.JobID == 0 {
		return Verified{}, fmt.Errorf("%w: claims field \"job_id\" missing", ErrCredential)
	}
	key, err := hex.DecodeString(c.Key)
	if err != nil || len(key) != KeySize {
		return Verified{}, fmt.Errorf("%w: claims field \"key\" malformed", ErrCredential)
	}
	return Verified{Claims: c, UID: d.UID, GID: d.GID, RestrictUID: d.RestrictUID, Key: key}, nil
}

// ExecMunger runs the munge and unmunge commands (no shell; the payload goes
// through stdin, never argv).
type ExecMunger struct {
	Munge, Unmunge string
	Socket         string
	Timeout        time.Duration
}

func (e ExecMunger) run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	t := e.Timeout
	if t <= 0 {
		t = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	if e.Socket != "" {
		args = append(args, "--socket="+e.Socket)
	}
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &out, &errb
	if err := cmd.Run(); err != nil {
		// what it printed before failing too: unmunge reports a replayed
		// credential with an exit code and still prints it
		return out.Bytes(), fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// Encode implements Munger.
func (e ExecMunger) Encode(ctx context.Context, payload []byte, restrictUID int, ttl time.Duration) (string, error) {
	bin := e.Munge
	if bin == "" {
		bin = "munge"
	}
	args := []string{"--restrict-uid=" + strconv.Itoa(restrictUID)}
	if ttl > 0 {
		args = append(args, "--ttl="+strconv.Itoa(int(ttl.Seconds())))
	}
	out, err := e.run(ctx, bin, args, payload)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// Decode implements Munger. unmunge prints "KEY: value" metadata lines, a
// blank line, then the payload.
func (e ExecMunger) Decode(ctx context.Context, cred string) (Decoded, error) {
	bin := e.Unmunge
	if bin == "" {
		bin = "unmunge"
	}
	out, err := e.run(ctx, bin, []string{"--numeric"}, []byte(cred))
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == mungeCredReplayed {
		// unmunge still prints what it decoded
		d, perr := parseUnmunge(out, true)
		if perr != nil {
			return Decoded{}, fmt.Errorf("%w: %w", err, perr)
		}
		return d, fmt.Errorf("%w: %w", ErrReplayed, err)
	}
	if err != nil {
		return Decoded{}, err
	}
	return parseUnmunge(out, false)
}

// mungeCredReplayed is EMUNGE_CRED_REPLAYED, unmunge's exit code and
// numeric STATUS for a credential decoded before.
const mungeCredReplayed = 17

// parseUnmunge reads unmunge --numeric's output; replayed: the status must
// be EMUNGE_CRED_REPLAYED instead of success. unmunge prints
// UID_RESTRICTION only for a restricted credential.
func parseUnmunge(out []byte, replayed bool) (Decoded, error) {
	meta, payload, ok := bytes.Cut(out, []byte("\n\n"))
	if !ok {
		return Decoded{}, errors.New("unmunge: no payload separator")
	}
	uid, gid, restrict := -1, -1, NoRestriction
	status := ""
	for _, line := range strings.Split(string(meta), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "STATUS":
			status = v
		case "UID":
			uid = atoiPrefix(v)
		case "GID":
			gid = atoiPrefix(v)
		case "UID_RESTRICTION":
			if restrict = atoiPrefix(v); restrict < 0 {
				return Decoded{}, fmt.Errorf("unmunge: UID_RESTRICTION %q", v)
			}
		}
	}
	switch {
	case replayed:
		if status != strconv.Itoa(mungeCredReplayed) && !strings.HasPrefix(status, "Replayed") {
			return Decoded{}, fmt.Errorf("unmunge: status %q, want replayed", status)
		}
	case !strings.HasPrefix(status, "Success") && status != "0":
		return Decoded{}, fmt.Errorf("unmunge: status %q", status)
	}
	if uid < 0 || gid < 0 {
		return Decoded{}, errors.New("unmunge: no UID/GID in metadata")
	}
	return Decoded{Payload: payload, UID: uid, GID: gid, RestrictUID: restrict}, nil
}

// atoiPrefix reads the leading number of "0" or "1001 (alice)"-style values.
func atoiPrefix(s string) int {
	f := strings.Fields(s)
	if len(f) == 0 {
		return -1
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n < 0 {
		return -1
	}
	return n
}
