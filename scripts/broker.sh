#!/usr/bin/env bash
# The test broker on loopback: Apache Kafka 4.4 (KRaft, jars from Maven Central), one combined
# broker/controller node or a cluster of N; or nisshi 0.8.1, a lighter one-node broker
# (STATESTORE_BROKER=nisshi).
#
#   scripts/broker.sh install          install the broker if missing (Java, Maven, the jars)
#   scripts/broker.sh start [N]        install it if missing, start N nodes (default 1), print
#                                      the bootstrap addresses (comma-separated)
#   scripts/broker.sh stop             stop every node and remove the working directory
#   scripts/broker.sh status           print the bootstrap addresses; exit 1 when not running
#   scripts/broker.sh kill NODE        SIGKILL node NODE (1..N); its data stays
#   scripts/broker.sh restart NODE     start node NODE again on its data
#   scripts/broker.sh pause NODE       SIGSTOP node NODE;  resume NODE: SIGCONT
#   scripts/broker.sh port NODE        print node NODE's client port
#   scripts/broker.sh ssl-bootstrap    sasl_ssl only: print the mTLS listeners' addresses
#   scripts/broker.sh certs            sasl_ssl only: print the directory of the certificates
#   scripts/broker.sh oauth            sasl, sasl_ssl and kerberos: print the directory of the
#                                      OAUTHBEARER signing keys
#   scripts/broker.sh kerberos         kerberos only: print the directory of the realm's
#                                      krb5.conf and keytabs
#   scripts/broker.sh log NODE         print the path of node NODE's log
#   scripts/broker.sh classpath        install Kafka if missing, print the Java classpath of its
#                                      jars (tests run Apache Kafka's own producer with it)
#
# Typical use:
#   export STATESTORE_KAFKA_BOOTSTRAP=$(scripts/broker.sh start)
#   cargo test -p statestore-changelog
#   scripts/broker.sh stop
#
# Every command is idempotent: `start` on a running cluster prints its addresses again, `stop`
# without one does nothing. Progress goes to stderr; stdout carries only the answer. The tests
# that kill brokers run clusters of their own through this script, each with its own
# STATESTORE_BROKER_STATE and STATESTORE_KAFKA_PORT (see statestore-test-support).
#
# Environment:
#   STATESTORE_BROKER         kafka (default) or nisshi (one node only)
#   STATESTORE_KAFKA_PORT     node 1's client port (default 19092); node i listens on
#                             PORT+2(i-1) and, with Kafka, its controller on the port after it
#   STATESTORE_BROKER_HOST    the address every node listens on and advertises (default
#                             127.0.0.1); a test that cuts a client off from the brokers uses
#                             the root end of a veth pair (see statestore-test-support)
#   STATESTORE_BROKER_STATE   state file (default ${TMPDIR:-/tmp}/statestore-broker.env)
#   STATESTORE_BROKER_WAIT    seconds to wait for a node to serve (default 90)
#   STATESTORE_BROKER_HOME    where the broker is installed
#                             (default ${XDG_CACHE_HOME:-$HOME/.cache}/statestore-broker)
#   STATESTORE_BROKER_HEAP    a Kafka node's -Xmx (default 512m)
#   STATESTORE_BROKER_SECURITY  kafka only: `sasl` makes each node's client listener
#                             SASL_PLAINTEXT with PLAIN (users admin/admin-secret and
#                             alice/alice-secret), SCRAM-SHA-512 (alice/alice-secret) and
#                             OAUTHBEARER: a JWT signed (RS256) with the key `oauth` prints
#                             (oauth.key, PKCS#8 PEM; the nodes read its public half from
#                             jwks.json there, key id "statestore-test"), not expired, of
#                             issuer ("iss") "statestore-test" for audience ("aud")
#                             "statestore", whose "sub" claim names the user (rogue.key,
#                             another key, signs tokens the nodes refuse); and turns on the
#                             StandardAuthorizer (super user admin; every other principal may
#                             do only what an ACL allows it)
#   STATESTORE_BROKER_ENGINE  nisshi only: sqlite (default) or memory (benchmarks only)
#   STATESTORE_BROKER_SECURITY=sasl_ssl  kafka only: `sasl`'s users and authoriser over TLS.
#                             The client listener (the addresses `start` prints) is SASL_SSL
#                             with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (alice, as in
#                             `sasl`) and OAUTHBEARER (as in `sasl`); a second listener, SSL
#                             on port PORT+2N+(i-1) of node i of N (`ssl-bootstrap` prints
#                             them), requires a client certificate and takes its CN as the
#                             principal (CN=carol is User:carol). The script makes the certificates with openssl in
#                             the directory `certs` prints: ca.pem (the CA that signed the
#                             nodes' certificate, valid for IP:$STATESTORE_BROKER_HOST and
#                             DNS:localhost), carol.pem and carol.key (a client certificate it
#                             signed), rogue-ca.pem, rogue.pem and rogue.key (another CA, which
#                             the nodes do not trust, and a CN=carol certificate it signed).
#                             Keys are PKCS#8 PEM without a password.
#   STATESTORE_BROKER_SECURITY=kerberos  kafka only: `sasl`'s listener, users and authoriser,
#                             and GSSAPI: an MIT Kerberos KDC (Debian's krb5-kdc, installed
#                             when missing) of realm STATESTORE.TEST on $HOST, port PORT+2N
#                             (TCP and UDP), started before the nodes and stopped with them.
#                             The directory `kerberos` prints holds krb5.conf (the realm, its
#                             KDC, no DNS and no host name canonicalisation: the nodes'
#                             principal is kafka/$HOST@STATESTORE.TEST, as librdkafka asks
#                             for a broker it reaches at $HOST) and the keytabs: kafka.keytab
#                             (the nodes'), alice.keytab (alice@STATESTORE.TEST, User:alice to
#                             the authoriser), stale.keytab (alice's key before the KDC changed
#                             it) and mallory.keytab (mallory@STATESTORE.TEST, whom the KDC no
#                             longer knows). A client needs KRB5_CONFIG=<dir>/krb5.conf, kinit
#                             (krb5-user) and Cyrus SASL's GSSAPI module
#                             (libsasl2-modules-gssapi-mit), installed with the KDC.
set -euo pipefail

SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PORT="${STATESTORE_KAFKA_PORT:-19092}"
STATE="${STATESTORE_BROKER_STATE:-${TMPDIR:-/tmp}/statestore-broker.env}"
WAIT="${STATESTORE_BROKER_WAIT:-90}"
BROKER_HOME="${STATESTORE_BROKER_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/statestore-broker}"
BROKER="${STATESTORE_BROKER:-kafka}"
HOST="${STATESTORE_BROKER_HOST:-127.0.0.1}"

log() { echo "broker.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

case "$BROKER" in
  kafka | nisshi) ;;
  *) die "STATESTORE_BROKER must be kafka or nisshi, not '$BROKER'" ;;
esac
SECURITY="${STATESTORE_BROKER_SECURITY:-}"
case "$SECURITY" in
  "" | sasl | sasl_ssl | kerberos) ;;
  *) die "STATESTORE_BROKER_SECURITY must be empty, sasl, sasl_ssl or kerberos, not '$SECURITY'" ;;
esac
[[ -z "$SECURITY" || "$BROKER" == kafka ]] || die "STATESTORE_BROKER_SECURITY needs kafka"

# True when something accepts TCP connections on $HOST:$1.
port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# True when process $1 runs (a killed node may linger as a zombie until its parent reaps it).
alive() {
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ "$stat" != Z* ]]
}

apt_install() {
  local sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  log "installing $* from Debian"
  $sudo_cmd apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "$@" >&2
}

# --- Apache Kafka --------------------------------------------------------------------------

# The jars live in a directory named after the pom's checksum, so a changed pom installs anew.
kafka_root() {
  echo "$BROKER_HOME/kafka-$(sha256sum "$SCRIPTS/kafka/pom.xml" | cut -c1-12)"
}

kafka_installed() { [[ -f "$(kafka_root)/libs/.complete" ]]; }

install_kafka() {
  command -v java >/dev/null || apt_install openjdk-17-jre-headless
  command -v mvn >/dev/null || apt_install maven
  local root work started=$SECONDS
  root=$(kafka_root)
  log "installing Apache Kafka's jars from Maven Central into $root/libs (about 55 MB)"
  work=$(mktemp -d "${TMPDIR:-/tmp}/statestore-kafka-install.XXXXXX")
  mvn -q -B -Dstyle.color=never -f "$SCRIPTS/kafka/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$work/libs" >&2 ||
    { rm -rf "$work"; die "mvn could not fetch the Kafka jars (see above)"; }
  touch "$work/libs/.complete"
  mkdir -p "$root"
  rm -rf "$root/libs"
  mv "$work/libs" "$root/libs"
  rm -rf "$work"
  log "installed Apache Kafka in $((SECONDS - started)) s"
}

# A KRaft cluster id: 16 random bytes, base64url without padding, as Kafka's Uuid prints them.
# Like Kafka's Uuid.randomUuid, never one starting with '-': the storage tool would read it as
# an option ("argument --cluster-id/-t: expected one argument").
cluster_id() {
  local id
  id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)
  while [[ "$id" == -* ]]; do id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22); done
  echo "$id"
}

# Node $1's mTLS listener port (sasl_ssl): after every node's client and controller ports.
node_ssl_port() { echo $((PORT + 2 * BROKER_NODES + $1 - 1)); }

# Makes the certificates of a sasl_ssl cluster in directory $1 (see STATESTORE_BROKER_SECURITY
# above): two CAs, the brokers' certificate signed by the first, and a CN=carol client
# certificate signed by each. Valid for ten years, so a kept directory never expires mid-test.
# Returns 1 (openssl's words in $1/openssl.log) when openssl fails: a caller in an `||` list
# runs it without `set -e`, so each step checks.
make_certs() {
  local dir=$1 ca name issuer subject ext
  command -v openssl >/dev/null || apt_install openssl
  mkdir -p "$dir"
  cat >"$dir/openssl.cnf" <<EOF
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[broker]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:$HOST,DNS:localhost
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
EOF
  for ca in "ca:statestore test CA" "rogue-ca:statestore untrusted CA"; do
    openssl req -x509 -config "$dir/openssl.cnf" -extensions ca -newkey rsa:2048 -nodes \
      -keyout "$dir/${ca%%:*}.key" -out "$dir/${ca%%:*}.pem" -days 3650 -subj "/CN=${ca#*:}" \
      >>"$dir/openssl.log" 2>&1 || return 1
  done
  for leaf in "broker:ca:/CN=statestore broker:broker" "carol:ca:/CN=carol:client" \
    "rogue:rogue-ca:/CN=carol:client"; do
    IFS=: read -r name issuer subject ext <<<"$leaf"
    openssl req -new -config "$dir/openssl.cnf" -newkey rsa:2048 -nodes -keyout "$dir/$name.key" \
      -out "$dir/$name.csr" -subj "$subject" >>"$dir/openssl.log" 2>&1 || return 1
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/$issuer.pem" -CAkey "$dir/$issuer.key" \
      -set_serial "0x$(openssl rand -hex 8)" -days 3650 -extfile "$dir/openssl.cnf" \
      -extensions "$ext" -out "$dir/$name.pem" >>"$dir/openssl.log" 2>&1 || return 1
    rm "$dir/$name.csr"
  done
}

# Makes the OAUTHBEARER keys in directory $1 (see STATESTORE_BROKER_SECURITY above): oauth.key,
# whose public half jwks.json holds, and rogue.key. Returns 1 when openssl fails, as make_certs.
make_oauth_keys() {
  local dir=$1 name n
  command -v openssl >/dev/null || apt_install openssl
  mkdir -p "$dir"
  for name in oauth rogue; do
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$dir/$name.key" \
      >>"$dir/openssl.log" 2>&1 || return 1
  done
  # A JWK's modulus: big-endian bytes in base64url without padding (RFC 7518); e is 65537.
  n=$(openssl rsa -in "$dir/oauth.key" -noout -modulus 2>>"$dir/openssl.log" | cut -d= -f2 |
    basenc --base16 -d | basenc --base64url -w0 | tr -d =) || return 1
  [[ -n "$n" ]] || return 1
  printf '{"keys":[{"kty":"RSA","use":"sig","alg":"RS256","kid":"statestore-test","n":"%s","e":"AQAB"}]}\n' \
    "$n" >"$dir/jwks.json"
}

# --- Kerberos (STATESTORE_BROKER_SECURITY=kerberos) ----------------------------------------

REALM=STATESTORE.TEST

# The KDC's port: after every node's client and controller ports.
kdc_port() { echo $((PORT + 2 * BROKER_NODES)); }

# The KDC (krb5-kdc), kadmin.local (krb5-admin-server), kinit (krb5-user), which librdkafka
# runs to get a client's ticket, and Cyrus SASL's GSSAPI module, which librdkafka
# authenticates with.
kerberos_installed() {
  [[ -x /usr/sbin/krb5kdc && -x /usr/sbin/kdb5_util && -x /usr/sbin/kadmin.local ]] &&
    command -v kinit >/dev/null && dpkg -s libsasl2-modules-gssapi-mit >/dev/null 2>&1
}

# Installs them under a lock, so two clusters starting at once do not run apt-get twice. The
# packages' scripts try to start Debian's own KDC and kadmind, which find no realm in
# /etc/krb5kdc and do not start (a container's policy-rc.d may not even let them try).
install_kerberos() {
  kerberos_installed && return 0
  mkdir -p "$BROKER_HOME"
  exec 8>"$BROKER_HOME/install-kerberos.lock"
  flock 8
  kerberos_installed ||
    apt_install krb5-kdc krb5-admin-server krb5-user libsasl2-modules-gssapi-mit
  exec 8>&-
  kerberos_installed || die "installing the Kerberos packages finished, but they are not there"
}

# Makes realm $REALM in directory $1 (see STATESTORE_BROKER_SECURITY above): krb5.conf and
# kdc.conf, the database, the principals and their keytabs. Returns 1 (the tools' words in
# $1/kadmin.log) when a step fails, as make_certs.
make_kerberos() {
  local dir=$1 port query
  port=$(kdc_port)
  mkdir -p "$dir"
  # No DNS and no canonicalisation: a client asks for kafka/<the address it connects to>,
  # and Java, which reads this file too, looks up the same name in the nodes' keytab.
  cat >"$dir/krb5.conf" <<EOF
[libdefaults]
  default_realm = $REALM
  dns_lookup_kdc = false
  dns_lookup_realm = false
  dns_canonicalize_hostname = false
  rdns = false
  udp_preference_limit = 1
  ticket_lifetime = 24h
  renew_lifetime = 7d
[realms]
  $REALM = {
    kdc = $HOST:$port
  }
EOF
  cat >"$dir/kdc.conf" <<EOF
[kdcdefaults]
  kdc_listen = $HOST:$port
  kdc_tcp_listen = $HOST:$port
[realms]
  $REALM = {
    database_name = $dir/principal
    key_stash_file = $dir/stash
    acl_file = $dir/kadm5.acl
    max_renewable_life = 7d
    supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
  }
[logging]
  kdc = FILE:$dir/kdc.log
  admin_server = FILE:$dir/kadmin.log
EOF
  : >"$dir/kadm5.acl"
  local -x KRB5_CONFIG="$dir/krb5.conf" KRB5_KDC_PROFILE="$dir/kdc.conf"
  kdb5_util create -s -r "$REALM" -P "statestore-master-$RANDOM$RANDOM" >>"$dir/kadmin.log" 2>&1 ||
    return 1
  # alice's first key goes to stale.keytab; ktadd gives her a new one for alice.keytab. mallory
  # has a keytab, and the KDC forgets him.
  for query in "addprinc -randkey kafka/$HOST" "ktadd -k $dir/kafka.keytab kafka/$HOST" \
    "addprinc -randkey alice" "ktadd -k $dir/stale.keytab alice" \
    "ktadd -k $dir/alice.keytab alice" "addprinc -randkey mallory" \
    "ktadd -k $dir/mallory.keytab mallory" "delprinc -force mallory"; do
    kadmin.local -r "$REALM" -q "$query" >>"$dir/kadmin.log" 2>&1 || return 1
  done
}

# Starts the KDC of the realm in directory $1, in its own session (as the nodes), and waits
# until it accepts connections.
start_kdc() {
  local dir=$1 waited=0
  (KRB5_CONFIG="$dir/krb5.conf" KRB5_KDC_PROFILE="$dir/kdc.conf" \
    exec setsid /usr/sbin/krb5kdc -n -r "$REALM" >>"$dir/kdc.out" 2>&1) &
  echo $! >"$dir/kdc.pid"
  until port_open "$(kdc_port)"; do
    alive "$(cat "$dir/kdc.pid")" ||
      { cat "$dir/kdc.out" "$dir/kdc.log" >&2 2>/dev/null; return 1; }
    ((waited >= WAIT * 10)) && { log "the KDC did not serve within ${WAIT}s"; return 1; }
    sleep 0.1
    waited=$((waited + 1))
  done
  log "KDC of $REALM serving on $HOST:$(kdc_port) (pid $(cat "$dir/kdc.pid"))"
}

stop_kdc() {
  local pid
  pid=$(cat "$BROKER_DIR/kerberos/kdc.pid" 2>/dev/null) || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do alive "$pid" || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  while alive "$pid"; do sleep 0.05; done
}

# File $1 as one properties value: Kafka takes PEM certificates and keys as config values,
# and java.util.Properties reads `\n` as a line break.
pem_value() { awk '{ printf "%s\\n", $0 }' "$1"; }

# Writes node $2 of an $3-node cluster into directory $1: server.properties, its data directory
# formatted, and run.sh, which starts it (used again by `restart`).
prepare_kafka_node() {
  local dir=$1 node=$2 nodes=$3 id=$4 root voters="" i
  root=$(kafka_root)
  for ((i = 1; i <= nodes; i++)); do
    voters+="${voters:+,}$i@$HOST:$((PORT + 2 * (i - 1) + 1))"
  done
  local port=$((PORT + 2 * (node - 1)))
  local replicas=$((nodes < 3 ? nodes : 3))
  # With three replicas, two must hold a write before acks=all returns (Kafka's advice).
  local min_isr=$((replicas >= 3 ? 2 : 1))
  local proto=PLAINTEXT format_args=() extra="" extra_map=""
  case "$SECURITY" in
    sasl | kerberos)
      proto=SASL_PLAINTEXT
      format_args=(--add-scram 'SCRAM-SHA-512=[name=alice,password=alice-secret]')
      ;;
    sasl_ssl)
      proto=SASL_SSL
      format_args=(--add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'
        --add-scram 'SCRAM-SHA-512=[name=alice,password=alice-secret]')
      extra=",SSL://$HOST:$(node_ssl_port "$node")"
      extra_map=",SSL:SSL"
      ;;
  esac
  mkdir -p "$dir"
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$voters
listeners=$proto://$HOST:$port$extra,CONTROLLER://$HOST:$((port + 1))
advertised.listeners=$proto://$HOST:$port$extra
controller.listener.names=CONTROLLER
inter.broker.listener.name=$proto
listener.security.protocol.map=$proto:$proto$extra_map,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
default.replication.factor=$replicas
min.insync.replicas=$min_isr
offsets.topic.replication.factor=$replicas
transaction.state.log.replication.factor=$replicas
transaction.state.log.min.isr=$min_isr
num.partitions=1
# A test's group forms at once instead of 3 s after its first member joins.
group.initial.rebalance.delay.ms=0
# Sessions as short as the tests' (Kafka's minimum is 6 s).
group.min.session.timeout.ms=1000
EOF
  if [[ -n "$SECURITY" ]]; then
    local listener=${proto,,} mechanisms=PLAIN,SCRAM-SHA-512,OAUTHBEARER
    [[ "$SECURITY" == sasl_ssl ]] && mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
    [[ "$SECURITY" == kerberos ]] && mechanisms+=,GSSAPI
    cat >>"$dir/server.properties" <<EOF
sasl.enabled.mechanisms=$mechanisms
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.$listener.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";
listener.name.$listener.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
# OAUTHBEARER: a JWT signed by a key of jwks.json, not expired, of issuer "statestore-test"
# for audience "statestore"; its "sub" claim is the principal. The broker logs in with the
# mechanism too, with an unsecured token it never sends (brokers talk PLAIN to each other).
listener.name.$listener.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin";
listener.name.$listener.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url=file://$BROKER_DIR/oauth/jwks.json
sasl.oauthbearer.expected.audience=statestore
sasl.oauthbearer.expected.issuer=statestore-test
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
# The controller listener is PLAINTEXT: its principal is ANONYMOUS.
super.users=User:admin;User:ANONYMOUS
allow.everyone.if.no.acl.found=false
EOF
  fi
  if [[ "$SECURITY" == kerberos ]]; then
    cat >>"$dir/server.properties" <<EOF
# GSSAPI: the nodes accept tickets for their principal, with its key from the keytab; a
# client's principal alice@STATESTORE.TEST is User:alice (the DEFAULT rule strips the
# realm, krb5.conf's default_realm).
sasl.kerberos.service.name=kafka
listener.name.$listener.gssapi.sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true keyTab="$BROKER_DIR/kerberos/kafka.keytab" principal="kafka/$HOST@$REALM";
EOF
  fi
  if [[ "$SECURITY" == sasl_ssl ]]; then
    local certs="$BROKER_DIR/certs"
    # PEM values rather than files: a PEM key file would need a password (KIP-651).
    cat >>"$dir/server.properties" <<EOF
listener.name.$listener.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.certificate.chain=$(pem_value "$certs/broker.pem")$(pem_value "$certs/ca.pem")
ssl.keystore.key=$(pem_value "$certs/broker.key")
ssl.truststore.type=PEM
ssl.truststore.certificates=$(pem_value "$certs/ca.pem")
# The mTLS listener: a client without a certificate signed by the CA is refused, and
# CN=<name> is the principal User:<name>.
listener.name.ssl.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([a-zA-Z0-9._-]+)\$/\$1/,DEFAULT
EOF
  fi
  java -cp "$root/libs/*" -Dlog4j2.configurationFile="$SCRIPTS/kafka/log4j2.properties" \
    kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" "${format_args[@]}" \
    >"$dir/format.log" 2>&1 ||
    { cat "$dir/format.log" >&2; die "formatting node $node failed"; }
  # Kafka reads an OAUTHBEARER JWKS only from a URL this property allows.
  local allowed=""
  [[ -n "$SECURITY" ]] &&
    allowed="-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=file://$BROKER_DIR/oauth/jwks.json"
  [[ "$SECURITY" == kerberos ]] &&
    allowed+=" -Djava.security.krb5.conf=$BROKER_DIR/kerberos/krb5.conf"
  cat >"$dir/run.sh" <<EOF
#!/usr/bin/env bash
exec java -Xms128m -Xmx${STATESTORE_BROKER_HEAP:-512m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \\
  -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true $allowed \\
  -Dlog4j2.configurationFile="$SCRIPTS/kafka/log4j2.properties" \\
  -cp "$root/libs/*" kafka.Kafka "$dir/server.properties"
EOF
  chmod +x "$dir/run.sh"
}

# --- nisshi --------------------------------------------------------------------------------

# nisshi 0.8.1 from crates.io, unpatched. It needs rustc 1.96, which Debian bookworm's security
# suite carries as rustc-web and cargo-web (/usr/bin/rustc and /usr/bin/cargo, beside rustup's
# toolchain, which stays the default).
NISSHI_VERSION=0.8.1
NISSHI_ROOT="$BROKER_HOME/nisshi-$NISSHI_VERSION"

nisshi_installed() { [[ -x "$NISSHI_ROOT/bin/nisshi" ]]; }

# True when /usr/bin/rustc is at least 1.96.
new_enough_rustc() {
  local version
  version=$(/usr/bin/rustc --version 2>/dev/null | awk '{print $2}') || return 1
  [[ -n "$version" ]] && [[ "$(printf '%s\n1.96.0\n' "$version" | sort -V | head -n 1)" == 1.96.0 ]]
}

install_nisshi() {
  new_enough_rustc || apt_install rustc-web cargo-web
  new_enough_rustc || die "rustc-web did not bring rustc 1.96 to /usr/bin/rustc"
  log "building nisshi $NISSHI_VERSION into $NISSHI_ROOT: about 500 crates, unoptimised," \
    "about 16 CPU-minutes (8 min on 2 idle cores)"
  local started=$SECONDS work
  work=$(mktemp -d "${TMPDIR:-/tmp}/statestore-nisshi-build.XXXXXX")
  CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_TARGET_DIR="$work/target" RUSTC=/usr/bin/rustc \
    /usr/bin/cargo install nisshi --version "$NISSHI_VERSION" --locked --root "$NISSHI_ROOT" >&2 ||
    { rm -rf "$work"; die "building nisshi failed"; }
  rm -rf "$work"
  log "built nisshi $NISSHI_VERSION in $(((SECONDS - started) / 60)) min $(((SECONDS - started) % 60)) s"
}

prepare_nisshi_node() {
  local dir=$1 engine="sqlite://nisshi.db"
  [[ "${STATESTORE_BROKER_ENGINE:-sqlite}" == memory ]] && engine="memory://nisshi/"
  mkdir -p "$dir"
  cat >"$dir/run.sh" <<EOF
#!/usr/bin/env bash
cd "$dir"
exec "$NISSHI_ROOT/bin/nisshi" broker --listener-url tcp://$HOST:$PORT \\
  --advertised-listener-url tcp://$HOST:$PORT --storage-engine "$engine"
EOF
  chmod +x "$dir/run.sh"
}

# --- both ----------------------------------------------------------------------------------

install_broker() {
  "${BROKER}_installed" && return 0
  mkdir -p "$BROKER_HOME"
  # Two installs at once (test.sh and a manual start) would fetch twice: the second waits.
  exec 9>"$BROKER_HOME/install.lock"
  flock 9
  "${BROKER}_installed" || "install_$BROKER"
  exec 9>&-
  "${BROKER}_installed" || die "installing $BROKER finished, but it is not there"
}

# Loads BROKER_DIR, BROKER_ADDR and BROKER_NODES from the state file; false when it has none.
load_state() {
  [[ -f "$STATE" ]] || return 1
  # shellcheck disable=SC1090
  source "$STATE"
  [[ -n "${BROKER_DIR:-}" && -d "$BROKER_DIR" ]]
}

node_dir() { echo "$BROKER_DIR/node$1"; }
node_pid() { cat "$(node_dir "$1")/pid" 2>/dev/null; }
node_alive() {
  local pid
  pid=$(node_pid "$1") && [[ -n "$pid" ]] && alive "$pid"
}
node_port() { echo $((PORT + 2 * ($1 - 1))); }

# True when any node of the cluster runs.
any_alive() {
  local i
  for ((i = 1; i <= BROKER_NODES; i++)); do node_alive "$i" && return 0; done
  return 1
}

# Starts node $1 from its run.sh, in its own session, so a Ctrl-C meant for the tests does not
# stop it mid-run.
launch_node() {
  local dir
  dir=$(node_dir "$1")
  # wait_node reads only what this run logs.
  stat -c %s "$dir/broker.log" >"$dir/log-offset" 2>/dev/null || echo 0 >"$dir/log-offset"
  (exec setsid "$dir/run.sh" >>"$dir/broker.log" 2>&1) &
  echo $! >"$dir/pid"
}

# Waits until node $1 serves: its port accepts connections and, for Kafka, it has logged that
# it started (the port opens before the node has joined the quorum).
wait_node() {
  local node=$1 dir port waited=0
  dir=$(node_dir "$node")
  port=$(node_port "$node")
  until port_open "$port" &&
    { [[ "$BROKER" == nisshi ]] ||
      tail -c +$(($(cat "$dir/log-offset") + 1)) "$dir/broker.log" | grep -q "Kafka Server started"; }; do
    if ! node_alive "$node"; then
      tail -n 30 "$dir/broker.log" >&2 || true
      die "node $node exited before serving on $HOST:$port (log above, $dir/broker.log)"
    fi
    ((waited >= WAIT * 10)) && die "node $node did not serve on $HOST:$port within ${WAIT}s"
    sleep 0.1
    waited=$((waited + 1))
  done
}

start() {
  local nodes=${1:-1}
  [[ "$nodes" =~ ^[1-9][0-9]?$ ]] || die "start takes a node count (1-99), not '$nodes'"
  if load_state && any_alive; then
    log "already running ($BROKER_NODES node(s), dir $BROKER_DIR)"
    echo "$BROKER_ADDR"
    return 0
  fi
  # A state file whose cluster died (a reboot, a kill): drop its directory and start afresh.
  [[ -n "${BROKER_DIR:-}" && -d "$BROKER_DIR" ]] && { stop_kdc; rm -rf "$BROKER_DIR"; }
  rm -f "$STATE"
  [[ "$BROKER" == kafka || "$nodes" == 1 ]] || die "nisshi runs one node only"
  local i addr="" ssl_addr="" port
  BROKER_NODES=$nodes
  for ((i = 1; i <= nodes; i++)); do
    for port in "$(node_port "$i")" $([[ "$BROKER" == kafka ]] && echo $(($(node_port "$i") + 1))) \
      $([[ "$SECURITY" == sasl_ssl ]] && node_ssl_port "$i"); do
      port_open "$port" &&
        die "port $port is already in use; set STATESTORE_KAFKA_PORT to a free port"
    done
    addr+="${addr:+,}$HOST:$(node_port "$i")"
    [[ "$SECURITY" == sasl_ssl ]] && ssl_addr+="${ssl_addr:+,}$HOST:$(node_ssl_port "$i")"
  done
  [[ "$SECURITY" == kerberos ]] && port_open "$(kdc_port)" &&
    die "port $(kdc_port) (the KDC's) is already in use; set STATESTORE_KAFKA_PORT to a free port"
  install_broker
  [[ "$SECURITY" == kerberos ]] && install_kerberos
  BROKER_DIR=$(mktemp -d "${TMPDIR:-/tmp}/statestore-broker.XXXXXX")
  BROKER_ADDR=$addr
  printf 'BROKER_KIND=%s\nBROKER_DIR=%q\nBROKER_ADDR=%s\nBROKER_NODES=%s\nBROKER_SSL_ADDR=%s\n' \
    "$BROKER" "$BROKER_DIR" "$BROKER_ADDR" "$BROKER_NODES" "$ssl_addr" >"$STATE"
  if [[ "$SECURITY" == sasl_ssl ]]; then
    make_certs "$BROKER_DIR/certs" ||
      { cat "$BROKER_DIR/certs/openssl.log" >&2; stop; die "making the certificates failed"; }
    log "certificates in $BROKER_DIR/certs (scripts/broker.sh certs)"
  fi
  if [[ "$SECURITY" == kerberos ]]; then
    make_kerberos "$BROKER_DIR/kerberos" ||
      { cat "$BROKER_DIR/kerberos/kadmin.log" >&2; stop; die "making the realm failed"; }
    start_kdc "$BROKER_DIR/kerberos" || { stop; die "the KDC did not start"; }
    log "realm $REALM in $BROKER_DIR/kerberos (scripts/broker.sh kerberos)"
  fi
  if [[ -n "$SECURITY" ]]; then
    make_oauth_keys "$BROKER_DIR/oauth" ||
      { cat "$BROKER_DIR/oauth/openssl.log" >&2; stop; die "making the OAUTHBEARER keys failed"; }
  fi
  if [[ "$BROKER" == kafka ]]; then
    local id pids=()
    id=$(cluster_id)
    # Formatting starts a JVM per node: in parallel.
    for ((i = 1; i <= nodes; i++)); do
      prepare_kafka_node "$(node_dir "$i")" "$i" "$nodes" "$id" &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || { stop; die "preparing the nodes failed"; }; done
  else
    prepare_nisshi_node "$(node_dir 1)"
  fi
  for ((i = 1; i <= nodes; i++)); do launch_node "$i"; done
  for ((i = 1; i <= nodes; i++)); do
    (wait_node "$i") || { stop; die "the cluster did not start"; }
  done
  log "$BROKER: $nodes node(s) serving on $addr (dir $BROKER_DIR, logs node*/broker.log)"
  echo "$addr"
}

# Sends signal $1 to every node (their run.sh exec'd the broker, so the pid is the broker's).
signal_all() {
  local i pid
  for ((i = 1; i <= BROKER_NODES; i++)); do
    pid=$(node_pid "$i") || continue
    kill "-$1" "$pid" 2>/dev/null || true
  done
}

stop() {
  if load_state; then
    signal_all CONT
    signal_all TERM
    local i
    for _ in $(seq 100); do
      any_alive || break
      sleep 0.1
    done
    signal_all KILL
    for ((i = 1; i <= BROKER_NODES; i++)); do
      while node_alive "$i"; do sleep 0.05; done
    done
    log "stopped $BROKER_NODES node(s)"
    stop_kdc
    rm -rf "$BROKER_DIR"
  else
    log "not running"
  fi
  rm -f "$STATE"
}

status() {
  if load_state && any_alive; then
    echo "$BROKER_ADDR"
    local i
    for ((i = 1; i <= BROKER_NODES; i++)); do
      if node_alive "$i"; then log "node $i: pid $(node_pid "$i"), port $(node_port "$i")"; else
        log "node $i: down"; fi
    done
  else
    log "not running"
    return 1
  fi
}

# Checks that argument $1 names a node of the running cluster.
need_node() {
  load_state || die "not running"
  [[ "${1:-}" =~ ^[0-9]+$ ]] && (($1 >= 1 && $1 <= BROKER_NODES)) ||
    die "NODE must be 1..$BROKER_NODES, not '${1:-}'"
}

kill_node() {
  need_node "$1"
  local pid
  pid=$(node_pid "$1") || return 0
  kill -9 "$pid" 2>/dev/null || true
  while alive "$pid"; do sleep 0.05; done
  log "killed node $1 (pid $pid)"
}

restart_node() {
  need_node "$1"
  if node_alive "$1"; then
    log "node $1 is running"
    return 0
  fi
  launch_node "$1"
  wait_node "$1"
  log "node $1 serving again on port $(node_port "$1") (pid $(node_pid "$1"))"
}

signal_node() {
  need_node "$2"
  node_alive "$2" || die "node $2 is not running"
  kill "-$1" "$(node_pid "$2")"
}

case "${1:-}" in
  install)
    install_broker
    [[ "$SECURITY" != kerberos ]] || install_kerberos
    ;;
  start) start "${2:-1}" ;;
  stop) stop ;;
  status) status ;;
  kill) kill_node "${2:-}" ;;
  restart) restart_node "${2:-}" ;;
  pause) signal_node STOP "${2:-}" ;;
  resume) signal_node CONT "${2:-}" ;;
  port) need_node "${2:-}" && node_port "$2" ;;
  ssl-bootstrap)
    load_state || die "not running"
    [[ -n "${BROKER_SSL_ADDR:-}" ]] || die "not a sasl_ssl cluster: no mTLS listener"
    echo "$BROKER_SSL_ADDR"
    ;;
  certs)
    load_state || die "not running"
    [[ -d "$BROKER_DIR/certs" ]] || die "not a sasl_ssl cluster: no certificates"
    echo "$BROKER_DIR/certs"
    ;;
  oauth)
    load_state || die "not running"
    [[ -d "$BROKER_DIR/oauth" ]] || die "not a sasl, sasl_ssl or kerberos cluster: no OAUTHBEARER keys"
    echo "$BROKER_DIR/oauth"
    ;;
  kerberos)
    load_state || die "not running"
    [[ -d "$BROKER_DIR/kerberos" ]] || die "not a kerberos cluster: no realm"
    echo "$BROKER_DIR/kerberos"
    ;;
  log) need_node "${2:-}" && echo "$(node_dir "$2")/broker.log" ;;
  classpath)
    [[ "$BROKER" == kafka ]] || die "classpath needs STATESTORE_BROKER=kafka"
    kafka_installed || install_kafka
    echo "$(kafka_root)/libs/*"
    ;;
  *)
    echo "usage: $0 install|start [N]|stop|status|kill N|restart N|pause N|resume N|port N|log N|" \
      "ssl-bootstrap|certs|oauth|kerberos|classpath" >&2
    exit 2
    ;;
esac
