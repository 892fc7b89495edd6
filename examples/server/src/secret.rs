//! The secrets the server is configured with: [`AdminToken`], and what it shares with
//! [`OwnerSecret`](crate::OwnerSecret): the check of a secret's characters and length, and
//! comparison in constant time.

use std::fmt;

/// Checks a secret: at least `min_len` visible ASCII characters (`!` to `~`), so it fits in a
/// header or an environment variable as is. The error names neither the secret nor any of
/// its characters.
pub(crate) fn check(secret: &str, min_len: usize) -> Result<(), String> {
    if !secret.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be visible ASCII characters only (no spaces)".to_owned());
    }
    if secret.len() < min_len {
        return Err(format!(
            "must be at least {min_len} characters, got {}",
            secret.len()
        ));
    }
    Ok(())
}

/// Whether `a` and `b` are the same bytes, in time that depends on their lengths only.
///
/// `==` on bytes stops at the first difference, so how long a wrong guess takes tells an
/// attacker how many of its leading bytes were right, and a secret can be found a byte at a
/// time. Here every byte pair is XORed and the differences ORed together, with no branch on
/// the bytes; `black_box` keeps the compiler from turning the fold back into an early exit.
/// Only the length can leak, and the length of a random secret is no secret worth keeping.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// The secret the administration routes require as `Authorization: Bearer <token>`.
///
/// Its `Debug` form hides the value, so a logged configuration never shows it, and `==`
/// compares in constant time like [`AdminToken::matches`].
#[derive(Clone, Eq)]
pub struct AdminToken(String);

impl AdminToken {
    /// Shortest token accepted, in characters.
    pub const MIN_LEN: usize = 16;

    /// Validates a token: at least [`MIN_LEN`](AdminToken::MIN_LEN) visible ASCII characters
    /// (`!` to `~`), so it fits in a header as is.
    pub fn new(token: impl Into<String>) -> Result<AdminToken, String> {
        let token = token.into();
        check(&token, Self::MIN_LEN)?;
        Ok(AdminToken(token))
    }

    /// Whether `presented` is the token, in time that depends on their lengths only: a wrong
    /// guess takes as long whatever its leading bytes.
    pub fn matches(&self, presented: &[u8]) -> bool {
        same(self.0.as_bytes(), presented)
    }
}

impl PartialEq for AdminToken {
    fn eq(&self, other: &Self) -> bool {
        self.matches(other.0.as_bytes())
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}
