# Produces testdata/kat.txt, the known-answer vectors of kat_test.go, with
# python3 and the cryptography package (independent of the Go code):
#   python3 store/testdata/kat.py > store/testdata/kat.txt
import base64, json
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
secret = b"tether-kat-cluster-secret-0001"
def hkdf(info):
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info.encode()).derive(secret)
kek = hkdf("tether keyring raft v1")
auth = hkdf("tether raft transport v1")
print("kek", kek.hex()); print("auth", auth.hex())
material = bytes(range(32))
ks = {"version":1,"keys":[{"id":"kat1","created":"2026-01-01T00:00:00Z","activates":"2026-01-02T00:00:00Z","expires":"2026-04-01T00:00:00Z","material":base64.b64encode(material).decode()}]}
plain = json.dumps(ks, separators=(",",":")).encode()
nonce = bytes.fromhex("000102030405060708090a0b")
magic = b"tkw\x01"
blob = magic + nonce + AESGCM(kek).encrypt(nonce, plain, magic)
print("wrapped", blob.hex())
cmd = bytes([1,1]) + json.dumps({"req":"kat-req-1","key":base64.b64encode(blob).decode()}, separators=(",",":")).encode()
print("install", cmd.hex())
snap = b"tsn\x01" + json.dumps({"cluster_id":"kat-cluster","keys":base64.b64encode(blob).decode(),
  "drains":[{"cluster":"web","destination":"d1","deadline":"2026-01-03T00:00:00Z"}],
  "requests":[{"id":"kat-req-1","code":0}]}, separators=(",",":")).encode()
print("snapshot", snap.hex())
# Snapshot format version 2: the same state, naming the command set applied
# into it (types 1-10 at body version 1), and three a binary that knows
# types 1-11 must refuse: a command it does not know (type 12), a field it
# does not know, a format version it does not know.
body2 = {"commands":"1111111111","cluster_id":"kat-cluster","keys":base64.b64encode(blob).decode(),
  "drains":[{"cluster":"web","destination":"d1","deadline":"2026-01-03T00:00:00Z"}],
  "requests":[{"id":"kat-req-1","code":0}]}
def enc(d): return json.dumps(d, separators=(",",":")).encode()
print("snapshot2", (b"tsn\x02" + enc(body2)).hex())
print("snapshot2_newer_command", (b"tsn\x02" + enc(dict(body2, commands="111111111111"))).hex())
print("snapshot2_unknown_field", (b"tsn\x02" + enc(dict(body2, drains=[{"cluster":"web","destination":"d1","deadline":"2026-01-03T00:00:00Z","weight":3}]))).hex())
print("snapshot3", (b"tsn\x03" + enc(body2)).hex())
# The cluster's config (SetConfig, type 11): a log entry, and a version 2
# snapshot holding two versions of it (the field "config", oldest first).
print("setconfig", (bytes([11,1]) + enc({"req":"kat-cfg","if_version":1,"content":{"Routes":{"r1":{"ClusterId":"c1"}}},
  "summary":"1 routes, 0 clusters","at":"2026-01-02T00:00:00Z"})).hex())
print("snapshot2_config", (b"tsn\x02" + enc(dict(body2, commands="11111111111", config=[
  {"version":1,"time":"2026-01-02T00:00:00Z","summary":"0 routes, 0 clusters","content":{},"index":5},
  {"version":2,"time":"2026-01-03T00:00:00Z","summary":"rollback to version 1","content":{"Routes":{}},"index":6}]))).hex())
# A backup file (version 2): body authenticated with HMAC-SHA256 under the
# key HKDF derives with the label "tether backup file v1".
bkey = hkdf("tether backup file v1")
print("backupkey", bkey.hex())
import hmac, hashlib
bbody = enc({"format":"tether-snapshot","version":2,"cluster_id":"kat-cluster","node":"kat-node","index":7,
  "saved":"2026-01-04T00:00:00Z","keys":1,"drains":1,"acme_entries":0,"commands":"1111111111",
  "state":base64.b64encode(b"tsn\x02" + enc(dict(body2, requests=[]))).decode()})
bfile = enc({"format":"tether-snapshot","version":2,"body":base64.b64encode(bbody).decode(),
  "sha256":hashlib.sha256(bbody).hexdigest(),"mac":hmac.new(bkey, bbody, hashlib.sha256).hexdigest()})
print("backup", bfile.hex())
