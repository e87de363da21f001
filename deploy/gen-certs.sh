#!/bin/sh
# gen-certs.sh: the secrets deploy/compose.yaml mounts, made with openssl.
#
#   deploy/gen-certs.sh [DIR]        (DIR: deploy/secrets by default)
#
# Writes into DIR, which must not hold them yet:
#   ca.crt, ca.key              the cluster's CA (keep ca.key offline: it only
#                               signs node certificates)
#   trident-N.crt, trident-N.key  node N's certificate (CN and DNS name
#                               trident-N, client and server use) and key
#   cookie                      the cluster cookie (cluster.cookie_file)
#   gossip.env                  TRIDENT_CLUSTER_GOSSIP_KEY, the AES key that
#                               encrypts gossip
# NODES="a b c" names other nodes. The container runs as uid/gid 65532 and
# must read the keys and the cookie (mode 0600): run as root, the script
# gives them to 65532 (TRIDENT_UID changes it); otherwise it says how.
set -eu

dir=${1:-$(dirname "$0")/secrets}
nodes=${NODES:-"trident-1 trident-2 trident-3"}
uid=${TRIDENT_UID:-65532}
days=${DAYS:-825}

command -v openssl >/dev/null 2>&1 || { echo "gen-certs.sh: openssl is needed" >&2; exit 1; }
if [ -e "$dir/ca.crt" ] || [ -e "$dir/cookie" ]; then
	echo "gen-certs.sh: $dir already holds a CA or a cookie; remove it first" >&2
	exit 1
fi
umask 077
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The CA: an EC P-256 key and a self-signed certificate that may sign
# certificates only.
cat >"$tmp/ca.cnf" <<CNF
[req]
distinguished_name = dn
x509_extensions = ca
prompt = no
[dn]
CN = Trident cluster CA
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
CNF
openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	-days 3650 -config "$tmp/ca.cnf" -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null

# One certificate per node, for both ends of inter-node mutual TLS.
for n in $nodes; do
	cat >"$tmp/$n.ext" <<EXT
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:$n
authorityKeyIdentifier = keyid
EXT
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-subj "/CN=$n" -keyout "$dir/$n.key" -out "$tmp/$n.csr" 2>/dev/null
	openssl x509 -req -in "$tmp/$n.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
		-CAcreateserial -CAserial "$tmp/ca.srl" -days "$days" \
		-extfile "$tmp/$n.ext" -out "$dir/$n.crt" 2>/dev/null
done

# The cookie and the gossip key: 32 random bytes each, base64.
openssl rand -base64 32 >"$dir/cookie"
printf 'TRIDENT_CLUSTER_GOSSIP_KEY=%s\n' "$(openssl rand -base64 32)" >"$dir/gossip.env"

chmod 0644 "$dir"/*.crt
chmod 0755 "$dir"
if [ "$(id -u)" = 0 ]; then
	for n in $nodes; do chown "$uid:$uid" "$dir/$n.key"; done
	chown "$uid:$uid" "$dir/cookie"
else
	echo "gen-certs.sh: the container user ($uid) must read the node keys and the cookie:"
	echo "  sudo chown $uid:$uid $dir/*-*.key $dir/cookie      (Docker, rootful Podman)"
	echo "  podman unshare chown $uid:$uid $dir/*-*.key $dir/cookie   (rootless Podman)"
fi
echo "gen-certs.sh: wrote the CA, $(echo $nodes | wc -w) node certificates, the cookie and the gossip key to $dir"
