// Package stream is isched's only door to Redis (go-redis v9): key names,
// bounded streams, consumer groups, plain keys for snapshots and state, and
// the credentials rules (one password file per ACL user; the privileged users'
// files must not be readable by others).
//
// Payloads are opaque bytes here: what they mean is internal/report's
// business, who wrote them is internal/auth's. A stream entry carries two
// fields, "m" (the payload) and "mac" (an authentication tag, may be empty).
package stream
