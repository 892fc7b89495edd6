//! Signed owner ids: with `OWNER_SECRET` set, the `Owner-Id` header must prove that the
//! application issued it.
//!
//! Without a secret the server takes `Owner-Id` as sent: whoever knows or guesses an owner id
//! acts on that owner's holds. Either the server sits behind the application's
//! authentication, which sets `Owner-Id` from the authenticated user and drops any value a
//! client sent, or owner ids must be unguessable, or the application signs them:
//!
//! ```text
//! Owner-Id: <owner>.<signature>
//! signature = lowercase hex of HMAC-SHA256(key = OWNER_SECRET, message = owner)
//! ```
//!
//! The owner is 1 to 255 visible ASCII characters and may itself contain `.`; the signature
//! is exactly 64 characters of `0-9a-f`, none of them a `.`, so the value splits at its last
//! `.` without ambiguity. The hold belongs to the owner, without the signature (`GET /holds`
//! shows `"owner":"cart-31"`). The application computes the signature when it authenticates
//! its user and hands the whole value to its client; [`OwnerSecret::sign`] does it in Rust,
//! and in a shell:
//!
//! ```sh
//! printf %s "$owner" | openssl dgst -sha256 -hmac "$OWNER_SECRET" | sed 's/^.*= //'
//! ```
//!
//! A value that is not `<owner>.<64 lowercase hex digits>`, or whose signature is not the
//! owner's under the secret, is refused ([`OwnerSecret::verify`]) before anything is read or
//! changed. The signature is compared in constant time. It does not expire: an issued value
//! is good for as long as the secret is, so rotating `OWNER_SECRET` revokes every value.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use slot_booking::OwnerId;

use crate::secret;

/// Characters of a signature: the hex of a SHA-256 HMAC.
pub const SIGNATURE_LEN: usize = 64;

/// The key that signs and verifies owner ids (`OWNER_SECRET`).
///
/// Its `Debug` form hides the value, and `==` compares in constant time.
#[derive(Clone)]
pub struct OwnerSecret {
    secret: String,
    keyed: Hmac<Sha256>,
}

/// Why an `Owner-Id` value was refused in signed mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignedOwnerError {
    /// Not `<owner>.<signature>`: no `.`, or a signature that is not 64 lowercase hex digits.
    Malformed,
    /// The part before the signature is not an owner id (1 to 255 visible ASCII characters).
    InvalidOwner(String),
    /// The signature is not the owner's under this secret.
    WrongSignature,
}

impl fmt::Display for SignedOwnerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignedOwnerError::Malformed => write!(
                f,
                "Owner-Id must be <owner>.<signature>, the signature {SIGNATURE_LEN} lowercase \
                 hex digits issued by the application"
            ),
            SignedOwnerError::InvalidOwner(reason) => f.write_str(reason),
            SignedOwnerError::WrongSignature => {
                f.write_str("the Owner-Id signature is not valid for this owner")
            }
        }
    }
}

impl std::error::Error for SignedOwnerError {}

impl OwnerSecret {
    /// Shortest secret accepted, in characters.
    pub const MIN_LEN: usize = 32;

    /// Validates a secret: at least [`MIN_LEN`](OwnerSecret::MIN_LEN) visible ASCII
    /// characters (`!` to `~`). Its bytes are the HMAC key.
    pub fn new(secret: impl Into<String>) -> Result<OwnerSecret, String> {
        let secret = secret.into();
        secret::check(&secret, Self::MIN_LEN)?;
        let keyed = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
            .map_err(|_| "cannot be an HMAC key".to_owned())?;
        Ok(OwnerSecret { secret, keyed })
    }

    /// The `Owner-Id` value that proves `owner`: `<owner>.<signature>` (see the module docs).
    pub fn sign(&self, owner: &OwnerId) -> String {
        let mut mac = self.keyed.clone();
        mac.update(owner.as_str().as_bytes());
        let signature = mac.finalize().into_bytes();
        let mut value = String::with_capacity(owner.as_str().len() + 1 + SIGNATURE_LEN);
        value.push_str(owner.as_str());
        value.push('.');
        for byte in signature {
            value.push(char::from(HEX[usize::from(byte >> 4)]));
            value.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        value
    }

    /// The owner an `Owner-Id` value proves: `<owner>.<signature>` with the owner's signature
    /// under this secret, compared in constant time; anything else is an error.
    pub fn verify(&self, value: &str) -> Result<OwnerId, SignedOwnerError> {
        let (owner, signature) = value.rsplit_once('.').ok_or(SignedOwnerError::Malformed)?;
        let signature = decode_hex(signature).ok_or(SignedOwnerError::Malformed)?;
        let owner = OwnerId::new(owner)
            .map_err(|error| SignedOwnerError::InvalidOwner(error.to_string()))?;
        let mut mac = self.keyed.clone();
        mac.update(owner.as_str().as_bytes());
        mac.verify_slice(&signature)
            .map_err(|_| SignedOwnerError::WrongSignature)?;
        Ok(owner)
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// 64 lowercase hex digits as 32 bytes; `None` for anything else.
fn decode_hex(text: &str) -> Option<[u8; SIGNATURE_LEN / 2]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let text = text.as_bytes();
    if text.len() != SIGNATURE_LEN {
        return None;
    }
    let mut bytes = [0u8; SIGNATURE_LEN / 2];
    for (byte, pair) in bytes.iter_mut().zip(text.chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(bytes)
}

impl PartialEq for OwnerSecret {
    /// In time that depends on the lengths only, like [`AdminToken`](crate::AdminToken)'s.
    fn eq(&self, other: &Self) -> bool {
        secret::same(self.secret.as_bytes(), other.secret.as_bytes())
    }
}

impl Eq for OwnerSecret {}

impl fmt::Debug for OwnerSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnerSecret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn secret() -> OwnerSecret {
        OwnerSecret::new(SECRET).unwrap()
    }

    fn owner(id: &str) -> OwnerId {
        OwnerId::new(id).unwrap()
    }

    #[test]
    fn signs_as_openssl_and_python_do() {
        // printf %s cart-31 | openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef
        // python3: hmac.new(secret, b"cart-31", hashlib.sha256).hexdigest()
        assert_eq!(
            secret().sign(&owner("cart-31")),
            "cart-31.2eb5f573c0fab2b0f2ac132dd567667202218e7ee9774975ca9dfbdd7cb944e0"
        );
    }

    #[test]
    fn a_signed_owner_verifies_even_with_dots_in_it() {
        for id in ["cart-31", "a.b.c", ".", "x.", &"o".repeat(OwnerId::MAX_LEN)] {
            let value = secret().sign(&owner(id));
            assert_eq!(secret().verify(&value), Ok(owner(id)), "{value}");
        }
    }

    #[test]
    fn anything_but_the_owners_signature_is_refused() {
        let signed = secret().sign(&owner("cart-31"));
        let signature = &signed["cart-31.".len()..];
        let other = OwnerSecret::new("another-secret-of-32-characters!!").unwrap();
        for (value, expected) in [
            ("cart-31".to_owned(), SignedOwnerError::Malformed),
            ("cart-31.".to_owned(), SignedOwnerError::Malformed),
            (signature.to_owned(), SignedOwnerError::Malformed),
            (
                format!("cart-31.{}", signature.to_uppercase()),
                SignedOwnerError::Malformed,
            ),
            (
                format!("cart-31.{}", &signature[1..]),
                SignedOwnerError::Malformed,
            ),
            (format!("cart-31.{signature}0"), SignedOwnerError::Malformed),
            (
                format!("{signed}.{signature}"),
                SignedOwnerError::WrongSignature,
            ),
            (
                format!("cart-32.{signature}"),
                SignedOwnerError::WrongSignature,
            ),
            (
                format!("cart-31..{signature}"),
                SignedOwnerError::WrongSignature,
            ),
            (
                other.sign(&owner("cart-31")),
                SignedOwnerError::WrongSignature,
            ),
            (
                format!("cart-31.{}", "0".repeat(64)),
                SignedOwnerError::WrongSignature,
            ),
        ] {
            assert_eq!(secret().verify(&value), Err(expected), "{value}");
        }
        assert!(matches!(
            secret().verify(&format!(".{signature}")),
            Err(SignedOwnerError::InvalidOwner(_))
        ));
        assert!(matches!(
            secret().verify(&format!("a b.{signature}")),
            Err(SignedOwnerError::InvalidOwner(_))
        ));
    }

    #[test]
    fn secrets_are_long_visible_ascii_compared_whole_and_never_shown() {
        assert!(OwnerSecret::new("x".repeat(31)).is_err());
        assert!(OwnerSecret::new(format!("{} ", "x".repeat(32))).is_err());
        assert!(OwnerSecret::new(format!("{}é", "x".repeat(32))).is_err());
        assert!(OwnerSecret::new("x".repeat(32)).is_ok());
        assert_eq!(secret(), secret());
        assert_ne!(secret(), OwnerSecret::new("x".repeat(32)).unwrap());
        assert!(!format!("{:?}", secret()).contains(SECRET));
    }

    proptest! {
        /// Whatever is changed in a signed value (one byte replaced, one inserted or removed),
        /// it proves nothing, unless the change gives back the very same value.
        #[test]
        fn an_altered_value_never_verifies(
            id in "[!-~]{1,40}",
            position in any::<prop::sample::Index>(),
            replacement in 0x21u8..=0x7e,
            edit in 0..3u8,
        ) {
            let signed = secret().sign(&owner(&id));
            let mut bytes = signed.clone().into_bytes();
            let at = position.index(bytes.len());
            match edit {
                0 => bytes[at] = replacement,
                1 => bytes.insert(at, replacement),
                _ => { bytes.remove(at); }
            }
            let altered = String::from_utf8(bytes).unwrap();
            match secret().verify(&altered) {
                Ok(verified) => prop_assert_eq!(altered, signed, "{} verified", verified),
                Err(_) => prop_assert_ne!(altered, signed),
            }
        }

        /// A value signed under another secret never verifies.
        #[test]
        fn another_secrets_signature_never_verifies(id in "[!-~]{1,40}", key in "[!-~]{32,48}") {
            prop_assume!(key != SECRET);
            let forged = OwnerSecret::new(key).unwrap().sign(&owner(&id));
            prop_assert_eq!(secret().verify(&forged), Err(SignedOwnerError::WrongSignature));
        }
    }
}
