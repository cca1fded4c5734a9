#!/usr/bin/env bash
# Makes a throwaway PKI for the TLS tests in DIR (EC P-256 keys, valid one day):
#   ca.pem                     the test CA
#   server.pem, server.key     for localhost and 127.0.0.1, signed by ca
#   client.pem, client.key     a client certificate signed by ca
#   other_ca.pem               another CA
#   other_client.pem/.key      a client certificate signed by other_ca
#
#   bash tests/security/make_test_certs.sh DIR
set -euo pipefail
dir="$1"
mkdir -p "$dir"
cd "$dir"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

ca() {  # NAME CN
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 1 -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
    2>/dev/null
}

leaf() {  # NAME CN CA EXTENSIONS
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
  printf '%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial \
    -out "$1.pem" -days 1 -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

ca ca "tdock test CA"
ca other_ca "another test CA"
leaf server localhost ca "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth"
leaf client worker ca "extendedKeyUsage=clientAuth"
leaf other_client worker other_ca "extendedKeyUsage=clientAuth"
