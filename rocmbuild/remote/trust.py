"""Trust, like Nix: Ed25519 keys named ``NAME:BASE64``, signatures over an artifact's exact
manifest and bundle, and the one check that decides whether a cached artifact may be used.

The signed payload (UTF-8, ``\\n`` line ends, nothing else)::

    rocmbuild-artifact-signature-v1
    key <the 64-hex artifact key>
    manifest-sha256 <sha256 of the manifest bytes, exactly as stored in the bundle>
    bundle-sha256 <sha256 of the bundle .tar.gz>

So a signature covers one artifact key, its exact manifest (every file's path, size and sha256,
hence every byte placed in a target) and the exact bundle bytes. The verifier rebuilds the
payload from what it downloaded, never from what the signature file claims.

The signature file (``<key>.sig``, JSON)::

    {"format": "rocmbuild-artifact-signature-v1", "signer": "lab-1", "signature": "<base64, 64 bytes>",
     "key": "<64 hex>", "manifest_sha256": "<hex>", "bundle_sha256": "<hex>"}

``signer`` names the key (as ``[trust] public_keys`` does); the other fields are informative. The
file is read by :data:`SIGNATURE_SPEC` into a :class:`SignatureFile`; one it refuses is an
:class:`UntrustedError` (exit 3) naming the field, like a missing one lets through only with
``--allow-unsigned``.

Decisions:
* a secret key file is one line ``NAME:BASE64`` of the 32-byte Ed25519 seed, mode 0600, never
  overwritten (``key generate`` refuses an existing file); a public key is ``NAME:BASE64`` of the
  32-byte raw public key (Nix's form, and Nix's key lengths);
* the check's order: a signature at all; its signer among the trusted names; the Ed25519
  signature over the payload rebuilt from the downloaded manifest and the bundle's sha256 (the
  caller then checks the bundle's bytes against that sha256, and every file against the manifest);
* two trusted keys may share a name only if they are the same key (refused when loading).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from rocmbuild import schema as s
from rocmbuild.errors import FetchError, InputError

FORMAT = "rocmbuild-artifact-signature-v1"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
MAX_SIG = 4096  # bytes; a signature file is about 400


class UntrustedError(FetchError):
    """An artifact that is unsigned, signed by a key not trusted here, or whose signature does not
    cover what was downloaded (exit 3: the artifact is refused, nothing is imported)."""


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise InputError(f"key name {name!r} is not usable",
                         "use letters, digits, '.', '_', '+', '-' (e.g. lab-builder-1), at most 64")
    return name


def _split(text: str, what: str, length: int) -> tuple[str, bytes]:
    name, sep, b64 = text.strip().partition(":")
    try:
        raw = base64.b64decode(b64, validate=True) if sep else b""
    except (binascii.Error, ValueError):
        raw = b""
    if not sep or not _NAME.match(name) or len(raw) != length:
        raise InputError(f"not a {what}: {text.strip()[:40]!r}...",
                         f"a {what} is NAME:BASE64 of {length} bytes, as `rocmbuild key generate` writes it")
    return name, raw


@dataclass(frozen=True)
class PublicKey:
    name: str
    raw: bytes

    @classmethod
    def parse(cls, text: str) -> "PublicKey":
        return cls(*_split(text, "public key", 32))

    def text(self) -> str:
        return f"{self.name}:{base64.b64encode(self.raw).decode()}"

    def verify(self, signature: bytes, payload: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.raw).verify(signature, payload)
            return True
        except InvalidSignature:
            return False


@dataclass(frozen=True)
class SecretKey:
    name: str
    seed: bytes

    @classmethod
    def generate(cls, name: str) -> "SecretKey":
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        k = Ed25519PrivateKey.generate()
        return cls(check_name(name), k.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()))

    @classmethod
    def read(cls, path: str | os.PathLike) -> "SecretKey":
        p = Path(path).expanduser()
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read the signing key {p}: {exc}",
                             "give the file `rocmbuild key generate` wrote (--sign-key FILE or [sign] key)") from exc
        if p.stat().st_mode & 0o077:
            raise InputError(f"signing key {p} is readable by others (mode {p.stat().st_mode & 0o777:o})",
                             f"chmod 600 {p}")
        return cls(*_split(text, "secret key", 32))

    def public(self) -> PublicKey:
        pub = Ed25519PrivateKey.from_private_bytes(self.seed).public_key()
        return PublicKey(self.name, pub.public_bytes(Encoding.Raw, PublicFormat.Raw))

    def text(self) -> str:
        return f"{self.name}:{base64.b64encode(self.seed).decode()}\n"

    def sign(self, payload: bytes) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(payload)


def write_secret(key: SecretKey, out: str | os.PathLike) -> Path:
    """Write ``key`` to a new file ``out`` (mode 0600 from its creation; an existing file refused)."""
    p = Path(out).expanduser()
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        raise InputError(f"{p} exists: a secret key is never overwritten",
                         "choose another --out, or remove the old key yourself (to rotate a key: generate the new one, add its public "
                         "key to [trust] public_keys everywhere, sign with it, then drop the old public key)") from None
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, key.text().encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return p


def payload(key: str, manifest: bytes, bundle_sha256: str) -> bytes:
    """The exact bytes a signature covers (module notes)."""
    return (f"{FORMAT}\nkey {key}\nmanifest-sha256 {hashlib.sha256(manifest).hexdigest()}\n"
            f"bundle-sha256 {bundle_sha256}\n").encode()


def sign(secret: SecretKey, key: str, manifest: bytes, bundle_sha256: str) -> bytes:
    """The signature file's bytes for this artifact."""
    sig = secret.sign(payload(key, manifest, bundle_sha256))
    doc = SignatureFile(secret.name, base64.b64encode(sig).decode(), FORMAT, key, hashlib.sha256(manifest).hexdigest(),
                        bundle_sha256)
    return (json.dumps(doc.to_json(), indent=1, sort_keys=True) + "\n").encode()


@dataclass(frozen=True)
class SignatureFile:
    """A signature file (module notes), parsed by :data:`SIGNATURE_SPEC`: its signer and signature
    decide; ``key`` and the two sha256 are informative (what the signer says it signed)."""

    signer: str
    signature: str  # base64 of the 64-byte Ed25519 signature
    format: str = FORMAT
    key: str | None = None
    manifest_sha256: str | None = None
    bundle_sha256: str | None = None

    def to_json(self) -> dict:
        return {"format": self.format, "signer": self.signer, "signature": self.signature, "key": self.key,
                "manifest_sha256": self.manifest_sha256, "bundle_sha256": self.bundle_sha256}

    def claims(self, key: str, manifest: bytes, bundle_sha256: str) -> bool:
        """Whether it says it covers exactly this key, manifest and bundle: then a signature that
        does not verify was made with another key of that name, not over other bytes."""
        return (self.key, self.manifest_sha256, self.bundle_sha256) == (key, hashlib.sha256(manifest).hexdigest(),
                                                                          bundle_sha256)


def _ed25519(text: str) -> bool:
    try:
        return len(base64.b64decode(text, validate=True)) == 64
    except (ValueError, binascii.Error):
        return False


SIGNATURE_SPEC = s.record(SignatureFile, format=s.one_of(FORMAT),
                          signer=s.check(s.string, lambda v: bool(_NAME.match(v)), "a key name (letters, digits, ._+-)"),
                          signature=s.check(s.string, _ed25519, "base64 of a 64-byte Ed25519 signature"))


def read_signature(sig_file: bytes | None) -> SignatureFile | None:
    """The signature file read by :data:`SIGNATURE_SPEC` (None: there is none); SchemaError naming
    the field when it cannot be read (not JSON, longer than :data:`MAX_SIG`, a field refused)."""
    if not sig_file:
        return None
    where = "the signature file"
    if len(sig_file) > MAX_SIG:
        raise s.SchemaError("", f"at most {MAX_SIG} bytes", f"{len(sig_file)} bytes", where)
    try:
        doc = json.loads(sig_file)
    except (ValueError, RecursionError):
        raise s.SchemaError("", "a JSON object", "bytes that are not JSON", where) from None
    return s.load(SIGNATURE_SPEC, doc, where)


def signer_of(sig_file: bytes | None) -> str | None:
    """The name a signature file gives its signer (None: no usable signature file)."""
    try:
        doc = read_signature(sig_file)
    except s.SchemaError:
        return None
    return doc.signer if doc else None


def trusted_keys(texts: Iterable[str]) -> dict[str, PublicKey]:
    out: dict[str, PublicKey] = {}
    for t in texts:
        k = PublicKey.parse(t)
        if k.name in out and out[k.name] != k:
            raise InputError(f"two trusted public keys are named {k.name}",
                             "give each key its own name in [trust] public_keys")
        out[k.name] = k
    return out


def check(where: str, key: str, manifest: bytes, bundle_sha256: str, sig_file: bytes | None,
          trusted: dict[str, PublicKey], *, allow_unsigned: bool = False) -> str | None:
    """The signer's name when the signature is good and trusted; None when ``allow_unsigned`` let
    an unsigned or untrusted artifact through; else :class:`UntrustedError`, in one line."""
    if not _HEX64.match(bundle_sha256):
        raise UntrustedError(f"{where}: artifact {key[:16]} has no usable bundle sha256", "push it again")
    hint = ("add the signer's public key to [trust] public_keys if you trust it, or pass --allow-unsigned "
            "for this command")
    try:
        doc = read_signature(sig_file)
    except s.SchemaError as exc:
        if allow_unsigned:
            return None
        raise UntrustedError(f"{where}: artifact {key[:16]}'s signature file cannot be read: {exc}",
                             "the cache entry was changed or damaged: push it again",
                             details={"key": key, "schema": exc.to_json()}) from None
    if doc is None:
        if allow_unsigned:
            return None
        raise UntrustedError(f"{where}: artifact {key[:16]} is not signed", hint, details={"key": key})
    signer = doc.signer
    pub = trusted.get(signer)
    if pub is None:
        if allow_unsigned:
            return None
        raise UntrustedError(f"{where}: artifact {key[:16]} is signed by '{signer}', which is not a trusted key",
                             hint, details={"key": key, "signer": signer})
    if not pub.verify(base64.b64decode(doc.signature), payload(key, manifest, bundle_sha256)):
        if allow_unsigned:
            return None
        if doc.claims(key, manifest, bundle_sha256):
            raise UntrustedError(
                f"{where}: artifact {key[:16]} is signed by '{signer}' for exactly this manifest and bundle, but "
                f"with another key than the one trusted here under the name '{signer}'",
                f"if the builder's key was generated anew, replace the '{signer}:...' entry of [trust] public_keys "
                "with its new public key (the one `rocmbuild key generate` printed there); otherwise someone else "
                "signs with that name: do not use this cache entry", details={"key": key, "signer": signer})
        raise UntrustedError(f"{where}: the signature by '{signer}' does not cover artifact {key[:16]}'s manifest "
                             "and bundle as downloaded", "the cache entry was changed or damaged: push it again",
                             details={"key": key, "signer": signer})
    return signer
