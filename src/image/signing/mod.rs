//! OpenPGP signatures of images: the publishers' release keys (built in, as data), keys added
//! with `--signing-key`, and the detached signature (`<image>.sig`) that names its key.
//!
//! A signature is parsed and its key found before the disk is opened (an unreadable signature or
//! one by an unknown key never touches the disk); the image bytes are checked as they stream
//! (see [`feed`]), and the verdict is a condition of writing the partition table.

pub(crate) mod feed;

use anyhow::{anyhow, bail, Context, Result};
use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::packet::{PublicKey, PublicSubkey, Signature};
use pgp::types::KeyDetails;
use std::path::Path;
use std::sync::Arc;

/// The publishers' public release keys coreos-installer trusts: Fedora's current releases (the
/// Fedora CoreOS streams) and Red Hat's release key 2 (RHCOS). Public data, kept as files.
const BUILTIN: [(&str, &[u8]); 4] = [
    ("Fedora 44", include_bytes!("keys/fedora-44.asc")),
    ("Fedora 45", include_bytes!("keys/fedora-45.asc")),
    ("Fedora 46", include_bytes!("keys/fedora-46.asc")),
    (
        "Red Hat release key 2",
        include_bytes!("keys/redhat-release-2.asc"),
    ),
];

/// The keys an image signature may be made with.
#[derive(Clone)]
pub struct Keyring {
    keys: Vec<SignedPublicKey>,
}

impl std::fmt::Debug for Keyring {
    /// The fingerprints: a key's numbers would drown a plan's debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Keyring")
            .field(&self.fingerprints())
            .finish()
    }
}

impl Keyring {
    /// The built-in publishers' keys.
    pub fn builtin() -> Keyring {
        let keys = BUILTIN
            .iter()
            .flat_map(|(name, data)| {
                read_keys(data).unwrap_or_else(|e| panic!("the built-in {name} key: {e:#}"))
            })
            .collect();
        Keyring { keys }
    }

    /// The built-in keys and those of `files` (`--signing-key`: armored or binary public keys).
    pub fn with_files(files: &[impl AsRef<Path>]) -> Result<Keyring> {
        let mut ring = Keyring::builtin();
        for f in files {
            let f = f.as_ref();
            let data = std::fs::read(f)
                .with_context(|| format!("reading the signing key {}", f.display()))?;
            let keys = read_keys(&data).with_context(|| {
                format!(
                    "{} is not an OpenPGP public key (armored or binary)",
                    f.display()
                )
            })?;
            ring.keys.extend(keys);
        }
        Ok(ring)
    }

    /// The primary keys' fingerprints (upper-case hex), in order.
    pub fn fingerprints(&self) -> Vec<String> {
        self.keys
            .iter()
            .map(|k| fingerprint(&k.primary_key))
            .collect()
    }

    /// The key that made `sig`: a primary key, or a signing subkey bound to its primary key, whose
    /// fingerprint (else key id) the signature names as its issuer.
    fn signer(&self, sig: &Signature) -> Option<Signer> {
        let fprs = sig.issuer_fingerprint();
        let ids = sig.issuer_key_id();
        let named = |k: &dyn KeyDetails| {
            let f = k.fingerprint();
            let id = k.legacy_key_id();
            fprs.iter().any(|x| **x == f) || ids.iter().any(|x| **x == id)
        };
        for k in &self.keys {
            if named(&k.primary_key) {
                return Some(Signer::Primary(k.primary_key.clone()));
            }
            for sub in &k.public_subkeys {
                let signs = sub.signatures.iter().any(|s| s.key_flags().sign());
                if named(&sub.key) && signs && sub.verify_bindings(&k.primary_key).is_ok() {
                    return Some(Signer::Subkey(sub.key.clone(), fingerprint(&k.primary_key)));
                }
            }
        }
        None
    }
}

fn read_keys(data: &[u8]) -> Result<Vec<SignedPublicKey>> {
    let (keys, _) = SignedPublicKey::from_reader_many(data)?;
    let keys = keys.collect::<pgp::errors::Result<Vec<_>>>()?;
    if keys.is_empty() {
        bail!("no public key found");
    }
    Ok(keys)
}

fn fingerprint(k: &impl KeyDetails) -> String {
    format!("{:X}", k.fingerprint())
}

#[derive(Clone, Debug)]
enum Signer {
    Primary(PublicKey),
    /// A signing subkey, and its primary key's fingerprint (what a user recognises).
    Subkey(PublicSubkey, String),
}

impl Signer {
    fn verify(&self, sig: &Signature, data: impl std::io::Read) -> pgp::errors::Result<()> {
        match self {
            Signer::Primary(k) => sig.verify(k, data),
            Signer::Subkey(k, _) => sig.verify(k, data),
        }
    }

    fn describe(&self) -> String {
        match self {
            Signer::Primary(k) => format!("key {}", fingerprint(k)),
            Signer::Subkey(k, primary) => {
                format!("subkey {} of key {primary}", fingerprint(k))
            }
        }
    }
}

/// A parsed signature of an image, with the key that must verify it.
#[derive(Clone, Debug)]
pub struct ImageSignature {
    sig: Arc<Signature>,
    signer: Signer,
    /// The image (URL or path), for messages.
    pub image: String,
    /// Where the signature came from (URL or path), for messages.
    pub source: String,
}

impl ImageSignature {
    /// Parse the detached signature `data` of `image` (read from `source`; armored or binary)
    /// and find its key in `keys`. Refused: anything unparseable (a truncated file), not one
    /// signature, or a signature by a key `keys` does not hold.
    pub fn parse(data: &[u8], keys: &Keyring, image: &str, source: &str) -> Result<ImageSignature> {
        let unreadable = |why: String| {
            anyhow!(
                "the signature {source} of {image} is not a valid OpenPGP signature ({why}): is it truncated? \
                 Refusing the image (a signature that is present is always checked)"
            )
        };
        let (mut sigs, _) =
            DetachedSignature::from_reader_many(data).map_err(|e| unreadable(e.to_string()))?;
        let sig = match (sigs.next(), sigs.next()) {
            (Some(Ok(s)), None) => s.signature,
            (Some(Err(e)), _) => return Err(unreadable(e.to_string())),
            (None, _) => return Err(unreadable("it holds no signature".into())),
            (Some(Ok(_)), Some(_)) => return Err(unreadable("it holds more than one".into())),
        };
        let signer = keys.signer(&sig).ok_or_else(|| {
            let mut issuer: Vec<String> = sig
                .issuer_fingerprint()
                .iter()
                .map(|f| format!("fingerprint {f:X}"))
                .collect();
            issuer.extend(
                sig.issuer_key_id()
                    .iter()
                    .map(|i| format!("key id {}", i.to_string().to_uppercase())),
            );
            let issuer = match issuer.is_empty() {
                true => "no issuer".to_string(),
                false => issuer.join(", "),
            };
            anyhow!(
                "the signature {source} of {image} was made by a key this program does not know ({issuer}); \
                 if you trust that key, pass its public key with --signing-key FILE"
            )
        })?;
        Ok(ImageSignature {
            sig: Arc::new(sig),
            signer,
            image: image.to_string(),
            source: source.to_string(),
        })
    }

    /// The key that must verify it, for messages.
    pub fn key(&self) -> String {
        self.signer.describe()
    }

    /// Check the signature over `data` (the image as stored or downloaded).
    pub fn verify(&self, data: impl std::io::Read) -> Result<()> {
        self.signer.verify(&self.sig, data).map_err(|e| {
            anyhow!(
                "the signature {} of {} does not match the image ({e}) with {}: \
                 the image is not the one its publisher signed; nothing bootable was left on the disk",
                self.source,
                self.image,
                self.key()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_keyring_holds_exactly_the_publishers_keys() {
        assert_eq!(
            Keyring::builtin().fingerprints(),
            [
                "36F612DCF27F7D1A48A835E4DBFCF71C6D9F90A6", // Fedora 44
                "4F50A6114CD5C6976A7F1179655A4B02F577861E", // Fedora 45
                "D924B10D3E810DABDD8B56B596E7E91491211FCE", // Fedora 46
                "567E347AD0044ADE55BA8A5F199E2F91FD431D51", // Red Hat release key 2
            ]
        );
    }

    #[test]
    fn garbage_is_neither_a_key_nor_a_signature() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("k.asc");
        std::fs::write(&f, b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nnot base64\n").unwrap();
        let e = Keyring::with_files(&[&f]).unwrap_err();
        assert!(
            format!("{e:#}").contains("is not an OpenPGP public key"),
            "{e:#}"
        );
        let ring = Keyring::builtin();
        let e = ImageSignature::parse(b"\x89\x01", &ring, "i.xz", "i.xz.sig").unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("i.xz.sig of i.xz is not a valid OpenPGP signature"),
            "{e}"
        );
    }
}
