//! Reading the settings' values ([`Config::from_vars`], [`Config::from_env`]) and checking
//! each, then the whole: every value that cannot be used is a [`ConfigError`] naming its
//! variable.

use std::time::Duration;

use super::{AdminToken, Config, ConfigError, OwnerSecret, MAX_AVAILABILITY_PAGE_LIMIT};
use crate::database::Kind;

impl Config {
    /// The configuration in the process's environment (the command line aside).
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_vars(|name| std::env::var(name).ok())
    }

    /// The configuration `var` gives (a variable's value, `None` when unset).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let defaults = Config::default();
        let read = Vars(var);
        let config = Config {
            database_url: read.text("DATABASE_URL").unwrap_or(defaults.database_url),
            bind: read.text("BIND").unwrap_or(defaults.bind),
            path_prefix: read.text("PATH_PREFIX").unwrap_or_default(),
            demo_slots: read.or("DEMO_SLOTS", switch, defaults.demo_slots)?,
            request_log: read.or("REQUEST_LOG", switch, defaults.request_log)?,
            hold_ttl: read.or("HOLD_TTL_SECONDS", seconds(false), defaults.hold_ttl)?,
            cache_period: read.or("CACHE_PERIOD_SECONDS", seconds(true), defaults.cache_period)?,
            header_timeout: read.or(
                "HEADER_TIMEOUT_SECONDS",
                seconds(false),
                defaults.header_timeout,
            )?,
            body_timeout: read.or(
                "BODY_TIMEOUT_SECONDS",
                seconds(false),
                defaults.body_timeout,
            )?,
            max_connections: read
                .value("MAX_CONNECTIONS", connections)?
                .unwrap_or_else(|| fit_to_file_limit(defaults.max_connections)),
            shutdown_grace: read.or(
                "SHUTDOWN_GRACE_SECONDS",
                seconds(true),
                defaults.shutdown_grace,
            )?,
            history_retention: read.or(
                "HISTORY_RETENTION_SECONDS",
                retention,
                defaults.history_retention,
            )?,
            admin_token: read.value("ADMIN_TOKEN", AdminToken::new)?,
            owner_secret: read.value("OWNER_SECRET", OwnerSecret::new)?,
            availability_page_limit: read.or(
                "AVAILABILITY_PAGE_LIMIT",
                page_limit,
                defaults.availability_page_limit,
            )?,
        };
        validate_prefix(&config.path_prefix)?;
        validate_database_url(&config.database_url)?;
        if config.bind.parse::<std::net::SocketAddr>().is_err() {
            return Err(error(
                "BIND",
                format!("{:?} is not an address like 127.0.0.1:3000", config.bind),
            ));
        }
        Ok(config)
    }
}

/// The variables' values, by name.
struct Vars<F>(F);

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    /// The value of `variable` as it is, `None` when unset.
    fn text(&self, variable: &str) -> Option<String> {
        (self.0)(variable)
    }

    /// The value of `variable` read by `parse`, `default` when unset; what `parse` refuses
    /// is an error naming `variable`.
    fn or<T>(
        &self,
        variable: &'static str,
        parse: impl FnOnce(String) -> Result<T, String>,
        default: T,
    ) -> Result<T, ConfigError> {
        Ok(self.value(variable, parse)?.unwrap_or(default))
    }

    /// The value of `variable` read by `parse`, `None` when unset; what `parse` refuses is
    /// an error naming `variable`.
    fn value<T>(
        &self,
        variable: &'static str,
        parse: impl FnOnce(String) -> Result<T, String>,
    ) -> Result<Option<T>, ConfigError> {
        self.text(variable)
            .map(|raw| parse(raw).map_err(|problem| error(variable, problem)))
            .transpose()
    }
}

fn error(variable: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        variable,
        problem: problem.into(),
    }
}

/// `0` or `1`.
fn switch(raw: String) -> Result<bool, String> {
    match raw.as_str() {
        "1" => Ok(true),
        "0" => Ok(false),
        other => Err(format!("{other:?} is not 0 or 1")),
    }
}

/// Whole seconds up to a year, `0` only when `zero_ok`.
fn seconds(zero_ok: bool) -> impl FnOnce(String) -> Result<Duration, String> {
    move |raw| match raw.parse::<u64>() {
        Ok(0) if !zero_ok => Err("must be at least 1".to_owned()),
        // A year bounds every setting: beyond it, a typo is likelier than an intent.
        Ok(n) if n <= 366 * 24 * 3600 => Ok(Duration::from_secs(n)),
        _ => Err(format!(
            "{raw:?} is not a whole number of seconds (at most a year)"
        )),
    }
}

/// `HISTORY_RETENTION_SECONDS`: whole seconds up to a year; `0` keeps history forever.
fn retention(raw: String) -> Result<Option<Duration>, String> {
    seconds(true)(raw).map(|keep| (!keep.is_zero()).then_some(keep))
}

/// `MAX_CONNECTIONS`: a positive whole number.
fn connections(raw: String) -> Result<usize, String> {
    match raw.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{raw:?} is not a positive whole number")),
    }
}

/// `AVAILABILITY_PAGE_LIMIT`: 1 to [`MAX_AVAILABILITY_PAGE_LIMIT`].
fn page_limit(raw: String) -> Result<u32, String> {
    match raw.parse::<u32>() {
        Ok(n) if (1..=MAX_AVAILABILITY_PAGE_LIMIT).contains(&n) => Ok(n),
        _ => Err(format!(
            "{raw:?} is not a whole number between 1 and {MAX_AVAILABILITY_PAGE_LIMIT}"
        )),
    }
}

/// An empty prefix, or `/segment(/segment)*` of unreserved URL characters: no trailing `/`,
/// no empty segment, nothing axum would read as a capture (`{x}`) or a wildcard.
fn validate_prefix(prefix: &str) -> Result<(), ConfigError> {
    if prefix.is_empty() {
        return Ok(());
    }
    let Some(rest) = prefix.strip_prefix('/') else {
        return Err(error(
            "PATH_PREFIX",
            format!("{prefix:?} must start with /, like /api"),
        ));
    };
    let segment_ok = |segment: &str| {
        !segment.is_empty()
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'))
    };
    if rest.split('/').all(segment_ok) {
        Ok(())
    } else {
        Err(error(
            "PATH_PREFIX",
            format!(
                "{prefix:?} must be /segment[/segment…] of letters, digits, -, _, . and ~, \
                 without a trailing /"
            ),
        ))
    }
}

/// A URL of a database the server opens ([`crate::database::SCHEMES`]).
fn validate_database_url(url: &str) -> Result<(), ConfigError> {
    match Kind::of(url) {
        Some(_) => Ok(()),
        None => Err(error("DATABASE_URL", Kind::expected())),
    }
}

/// `wanted`, lowered so that connections, the database pool and the process's other files fit
/// under its soft open-file limit (read from `/proc/self/limits` where there is one).
fn fit_to_file_limit(wanted: usize) -> usize {
    /// Files kept for the listener, the database pool, logs and the runtime.
    const RESERVED: usize = 64;
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
            line.split_whitespace().nth(3)?.parse::<usize>().ok()
        });
    match limit {
        Some(limit) => wanted.min(limit.saturating_sub(RESERVED).max(1)),
        None => wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SETTINGS;

    fn with(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_vars(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let config = with(&[]).unwrap();
        assert_eq!(
            Config {
                max_connections: Config::default().max_connections,
                ..config.clone()
            },
            Config::default()
        );
        assert!(config.max_connections >= 1 && config.max_connections <= 512);
    }

    #[test]
    fn every_setting_is_read() {
        let config = with(&[
            ("DATABASE_URL", "postgres://db/app"),
            ("BIND", "0.0.0.0:8080"),
            ("PATH_PREFIX", "/api/v1"),
            ("DEMO_SLOTS", "0"),
            ("HOLD_TTL_SECONDS", "60"),
            ("CACHE_PERIOD_SECONDS", "0"),
            ("HEADER_TIMEOUT_SECONDS", "3"),
            ("BODY_TIMEOUT_SECONDS", "4"),
            ("MAX_CONNECTIONS", "7"),
            ("SHUTDOWN_GRACE_SECONDS", "2"),
            ("ADMIN_TOKEN", "s3cret-admin-token-0123"),
            ("AVAILABILITY_PAGE_LIMIT", "50"),
            ("REQUEST_LOG", "0"),
            ("HISTORY_RETENTION_SECONDS", "3600"),
            ("OWNER_SECRET", "0123456789abcdef0123456789abcdef"),
        ])
        .unwrap();
        assert_eq!(
            config,
            Config {
                database_url: "postgres://db/app".into(),
                bind: "0.0.0.0:8080".into(),
                path_prefix: "/api/v1".into(),
                demo_slots: false,
                hold_ttl: Duration::from_secs(60),
                cache_period: Duration::ZERO,
                header_timeout: Duration::from_secs(3),
                body_timeout: Duration::from_secs(4),
                max_connections: 7,
                shutdown_grace: Duration::from_secs(2),
                admin_token: Some(AdminToken::new("s3cret-admin-token-0123").unwrap()),
                availability_page_limit: 50,
                request_log: false,
                history_retention: Some(Duration::from_secs(3600)),
                owner_secret: Some(OwnerSecret::new("0123456789abcdef0123456789abcdef").unwrap()),
            }
        );
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (variable, value) in [
            ("PATH_PREFIX", "api"),
            ("PATH_PREFIX", "/{x}"),
            ("PATH_PREFIX", "/api/"),
            ("PATH_PREFIX", "//api"),
            ("PATH_PREFIX", "/*rest"),
            ("PATH_PREFIX", "/a b"),
            ("DATABASE_URL", "oracle://db"),
            ("DATABASE_URL", "mysqlx://db"),
            ("DATABASE_URL", "db.sqlite"),
            ("BIND", "localhost"),
            ("DEMO_SLOTS", "yes"),
            ("HOLD_TTL_SECONDS", "0"),
            ("HOLD_TTL_SECONDS", "-1"),
            ("HEADER_TIMEOUT_SECONDS", "1.5"),
            ("BODY_TIMEOUT_SECONDS", "99999999999"),
            ("MAX_CONNECTIONS", "0"),
            ("SHUTDOWN_GRACE_SECONDS", "x"),
            ("AVAILABILITY_PAGE_LIMIT", "0"),
            ("AVAILABILITY_PAGE_LIMIT", "100001"),
            ("AVAILABILITY_PAGE_LIMIT", "ten"),
            ("REQUEST_LOG", "yes"),
            ("HISTORY_RETENTION_SECONDS", "-1"),
            ("HISTORY_RETENTION_SECONDS", "7d"),
            ("HISTORY_RETENTION_SECONDS", "31622401"),
            ("ADMIN_TOKEN", ""),
            ("ADMIN_TOKEN", "fifteen-chars15"),
            ("ADMIN_TOKEN", "sixteen chars 16"),
            ("ADMIN_TOKEN", "token-with-é-in-the-middle"),
            ("ADMIN_TOKEN", "tab\tin-a-long-admin-token"),
            ("OWNER_SECRET", ""),
            ("OWNER_SECRET", "thirty-one-characters-secret-31"),
            ("OWNER_SECRET", "thirty-two characters, a space 32"),
        ] {
            let error = with(&[(variable, value)]).unwrap_err();
            assert_eq!(error.variable, variable, "{value:?}");
            let line = error.to_string();
            assert!(line.starts_with(&format!("invalid {variable}: ")), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
    }

    #[test]
    fn history_is_kept_a_week_unless_set_and_zero_keeps_it_forever() {
        assert_eq!(
            with(&[]).unwrap().history_retention,
            Some(Duration::from_secs(7 * 24 * 3600))
        );
        let forever = with(&[("HISTORY_RETENTION_SECONDS", "0")]).unwrap();
        assert_eq!(forever.history_retention, None);
        let year = with(&[("HISTORY_RETENTION_SECONDS", "31622400")]).unwrap();
        assert_eq!(
            year.history_retention,
            Some(Duration::from_secs(31_622_400))
        );
    }

    #[test]
    fn every_database_scheme_is_accepted_and_named_when_one_is_not() {
        for url in [
            "sqlite://slot_booking.db",
            "sqlite::memory:",
            "postgres://db/app",
            "postgresql://db/app",
            "mysql://root@db:3306/app",
            "mariadb://root@db/app?ssl-mode=required",
        ] {
            let config = with(&[("DATABASE_URL", url)]).unwrap();
            assert_eq!(config.database_url, url);
        }
        let line = with(&[("DATABASE_URL", "oracle://db")])
            .unwrap_err()
            .to_string();
        assert_eq!(
            line,
            "invalid DATABASE_URL: must start with sqlite:, postgres:, postgresql:, mysql: \
             or mariadb:"
        );
    }

    #[test]
    fn admin_tokens_are_compared_whole_and_never_shown() {
        let token = AdminToken::new("0123456789abcdef").unwrap();
        assert!(token.matches(b"0123456789abcdef"));
        for wrong in [
            &b""[..],
            b"0123456789abcde",
            b"0123456789abcdeF",
            b"1123456789abcdef",
            b"0123456789abcdef0",
        ] {
            assert!(!token.matches(wrong), "{wrong:?}");
        }
        assert_eq!(token, AdminToken::new("0123456789abcdef").unwrap());
        assert_ne!(token, AdminToken::new("0123456789abcdeg").unwrap());
        let shown = format!(
            "{:?}",
            with(&[("ADMIN_TOKEN", "0123456789abcdef")]).unwrap()
        );
        assert!(!shown.contains("0123456789abcdef"), "{shown}");
        assert!(with(&[]).unwrap().admin_token.is_none());
        for bad in ["short-secret", "a secret with spaces"] {
            let line = with(&[("ADMIN_TOKEN", bad)]).unwrap_err().to_string();
            assert!(!line.contains(bad), "{line}");
        }
    }

    #[test]
    fn the_owner_secret_is_never_shown() {
        let secret = "0123456789abcdef0123456789abcdef";
        let shown = format!("{:?}", with(&[("OWNER_SECRET", secret)]).unwrap());
        assert!(!shown.contains(secret), "{shown}");
        let line = with(&[("OWNER_SECRET", "short secret")])
            .unwrap_err()
            .to_string();
        assert!(!line.contains("short secret"), "{line}");
    }

    #[test]
    fn the_documented_defaults_are_the_defaults() {
        let given: Vec<(&str, &str)> = SETTINGS
            .iter()
            .filter_map(|s| s.default.map(|d| (s.variable, d)))
            .collect();
        let explicit = with(&given).unwrap();
        assert_eq!(explicit.max_connections, Config::default().max_connections);
        let fitted = with(&[]).unwrap();
        assert_eq!(
            explicit,
            Config {
                max_connections: explicit.max_connections,
                ..fitted
            }
        );
        assert_eq!(fitted.max_connections, fit_to_file_limit(512));
    }

    #[test]
    fn the_open_file_limit_lowers_the_connection_limit() {
        let fitted = fit_to_file_limit(usize::MAX);
        assert!(fitted < usize::MAX, "no open-file limit was read");
        assert_eq!(fit_to_file_limit(1), 1);
    }
}
