//go:build cgo && libmunge

package auth

/*
#cgo LDFLAGS: -lmunge
#include <stdlib.h>
#include <munge.h>

// Variadic munge_ctx_set cannot be called from Go: one wrapper per type.
static munge_err_t ctx_set_str(munge_ctx_t ctx, int opt, const char *v) { return munge_ctx_set(ctx, opt, v); }
static munge_err_t ctx_set_int(munge_ctx_t ctx, int opt, int v) { return munge_ctx_set(ctx, opt, v); }
static munge_err_t ctx_set_uid(munge_ctx_t ctx, int opt, uid_t v) { return munge_ctx_set(ctx, opt, v); }
static munge_err_t ctx_get_uid(munge_ctx_t ctx, int opt, uid_t *v) { return munge_ctx_get(ctx, opt, v); }
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// LibMunger talks to munged through libmunge in-process: one round trip on
// munged's socket per credential, where ExecMunger starts a process (~14 ms
// of CPU for unmunge here, the coordinator's largest cost in a burst of
// job starts). Built with the libmunge tag (and cgo); DefaultMunger returns
// it then. Its verdicts are ExecMunger's: ErrReplayed with the payload and
// ids MUNGE still decoded, any other MUNGE error as an error naming it.
type LibMunger struct {
	// Socket is munged's socket; empty: libmunge's default.
	Socket string
}

// DefaultMunger is the Munger a service uses: libmunge in-process in this
// build, on munged's default socket unless socket is set.
func DefaultMunger(socket string) Munger { return LibMunger{Socket: socket} }

// MungerKind names DefaultMunger's implementation (logged at start).
const MungerKind = "libmunge"

// newCtx is a context for one call (a context must not be shared between
// threads; one per call is cheap next to the socket round trip).
func (m LibMunger) newCtx() (C.munge_ctx_t, error) {
	mc := C.munge_ctx_create()
	if mc == nil {
		return nil, errors.New("libmunge: cannot create a context (out of memory)")
	}
	if m.Socket != "" {
		s := C.CString(m.Socket)
		defer C.free(unsafe.Pointer(s))
		if e := C.ctx_set_str(mc, C.MUNGE_OPT_SOCKET, s); e != C.EMUNGE_SUCCESS {
			err := ctxError(mc, e, "socket")
			C.munge_ctx_destroy(mc)
			return nil, err
		}
	}
	return mc, nil
}

// ctxError describes a MUNGE error, with the context's detail when it has one.
func ctxError(mc C.munge_ctx_t, e C.munge_err_t, what string) error {
	msg := C.GoString(C.munge_strerror(e))
	if mc != nil {
		if d := C.munge_ctx_strerror(mc); d != nil {
			msg = C.GoString(d)
		}
	}
	return fmt.Errorf("libmunge %s: %s (munge error %d)", what, msg, int(e))
}

// Encode implements Munger.
func (m LibMunger) Encode(ctx context.Context, payload []byte, restrictUID int, ttl time.Duration) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if restrictUID < 0 {
		return "", fmt.Errorf("libmunge encode: restrict uid %d", restrictUID)
	}
	mc, err := m.newCtx()
	if err != nil {
		return "", err
	}
	defer C.munge_ctx_destroy(mc)
	if e := C.ctx_set_uid(mc, C.MUNGE_OPT_UID_RESTRICTION, C.uid_t(restrictUID)); e != C.EMUNGE_SUCCESS {
		return "", ctxError(mc, e, "uid restriction")
	}
	if ttl > 0 {
		if e := C.ctx_set_int(mc, C.MUNGE_OPT_TTL, C.int(ttl/time.Second)); e != C.EMUNGE_SUCCESS {
			return "", ctxError(mc, e, "ttl")
		}
	}
	var buf unsafe.Pointer
	if len(payload) > 0 {
		buf = C.CBytes(payload)
		defer C.free(buf)
	}
	var cred *C.char
	if e := C.munge_encode(&cred, mc, buf, C.int(len(payload))); e != C.EMUNGE_SUCCESS {
		return "", ctxError(mc, e, "encode")
	}
	defer C.free(unsafe.Pointer(cred))
	return C.GoString(cred), nil
}

// Decode implements Munger. The uid restriction is read from the context
// munge_decode filled (MUNGE_OPT_UID_RESTRICTION; MUNGE_UID_ANY when none).
func (m LibMunger) Decode(ctx context.Context, cred string) (Decoded, error) {
	if err := ctx.Err(); err != nil {
		return Decoded{}, err
	}
	mc, err := m.newCtx()
	if err != nil {
		return Decoded{}, err
	}
	defer C.munge_ctx_destroy(mc)
	cs := C.CString(cred)
	defer C.free(unsafe.Pointer(cs))
	var (
		buf unsafe.Pointer
		n   C.int
		uid C.uid_t
		gid C.gid_t
	)
	e := C.munge_decode(cs, mc, &buf, &n, &uid, &gid)
	if buf != nil {
		defer C.free(buf)
	}
	var payload []byte
	if buf != nil && n > 0 {
		payload = C.GoBytes(buf, n)
	} else if e == C.EMUNGE_SUCCESS || e == C.EMUNGE_CRED_REPLAYED {
		payload = []byte{}
	}
	if e != C.EMUNGE_SUCCESS && e != C.EMUNGE_CRED_REPLAYED {
		return Decoded{}, ctxError(mc, e, "decode")
	}
	d := Decoded{Payload: payload, UID: int(uid), GID: int(gid), RestrictUID: NoRestriction}
	var r C.uid_t
	if ge := C.ctx_get_uid(mc, C.MUNGE_OPT_UID_RESTRICTION, &r); ge != C.EMUNGE_SUCCESS {
		return Decoded{}, ctxError(mc, ge, "uid restriction")
	}
	if r != ^C.uid_t(0) { // MUNGE_UID_ANY
		d.RestrictUID = int(r)
	}
	if e == C.EMUNGE_CRED_REPLAYED {
		// MUNGE still decoded it: OpenRedelivered may use what it says
		return d, fmt.Errorf("%w: %w", ErrReplayed, ctxError(mc, e, "decode"))
	}
	return d, nil
}
