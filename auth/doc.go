// Package auth holds Trident's users, their password hashes and tags, and
// their per-vhost configure/write/read permissions, with RabbitMQ's semantics:
//
//   - Passwords are hashed as rabbit_password_hashing_sha256 (a 4-byte random
//     salt followed by sha256(salt+password), exported as base64), so
//     definitions round-trip with RabbitMQ. Hashes made with
//     rabbit_password_hashing_sha512 are accepted too.
//   - A permission is three regular expressions matched (unanchored, as
//     RabbitMQ does) against a resource name; the empty expression matches
//     nothing and ".*" matches everything. The default exchange "" is
//     checked under the name "amq.default".
//   - A user may use a vhost iff it has a permission record there.
//   - Users listed in Options.LoopbackUsers authenticate only from a loopback
//     address (RabbitMQ's loopback_users; guest by default).
//   - Topic permissions (TopicPermission) restrict routing keys per user,
//     vhost and topic exchange: write on publish, read on bind/subscribe,
//     checked by CheckTopic or a per-connection TopicCache.
//   - Failed logins are logged and rate-limited per source address
//     (ratelimit.go); authentications are audit records (audit.go).
//   - OAuth 2 (oauth2*.go): with Options.OAuth2, a JWT access token given
//     as a password (or to AuthenticateToken) is validated with go-jose as
//     RabbitMQ's rabbitmq_auth_backend_oauth2 does, and yields a token user
//     whose permissions, topic permissions and tags are the token's scopes;
//     Check, CheckVHost and TopicCache apply them like database records, so
//     every front end enforces them alike. Options.Backends orders the
//     backends as RabbitMQ's auth_backends. UpdateSecret swaps a token
//     user's scopes in place; ExpiryWatch tells a front end when to close.
//
// Every change is written to the Store (keys "user/<name>",
// "perm/<vhost>/<user>" and "tperm/<vhost>/<user>/<exchange>", path-escaped,
// JSON values) before it becomes
// visible. Reads (Authenticate, Lookup, Check) take no lock: they load an
// immutable snapshot that writers replace under Users.mu. Checks always use
// the current snapshot, so a permission change or a user deletion applies
// to the next check of an already authenticated *User.
package auth
