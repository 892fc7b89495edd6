//! The server's configuration, read from the command line and the environment and checked as
//! a whole before anything is opened: a bad value stops the process with one line naming it.
//!
//! Every setting is in [`SETTINGS`]: its environment variable, its flag, its default and what
//! it does. The command line ([`command`], `server --help`) is built from it, and a test
//! checks that the README's settings table and the `server` example's agree with it.

use std::ffi::OsString;
use std::fmt;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

pub use crate::owner::OwnerSecret;
pub use crate::secret::AdminToken;

/// One setting of the server: how it is set and what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The environment variable, e.g. `DATABASE_URL`.
    pub variable: &'static str,
    /// The command-line flag, without its dashes: the variable in lower case with `-` for
    /// `_`, e.g. `database-url`.
    pub flag: &'static str,
    /// What the value is, as `--help` names it.
    pub value_name: &'static str,
    /// The default as written in the documentation, `None` for unset.
    pub default: Option<&'static str>,
    /// One line for `--help`.
    pub help: &'static str,
}

/// Every setting of the server, in the order of the documentation's tables. A flag wins over
/// its environment variable, which wins over the default.
pub const SETTINGS: &[Setting] = &[
    Setting {
        variable: "DATABASE_URL",
        flag: "database-url",
        value_name: "URL",
        default: Some("sqlite://slot_booking.db"),
        help: "sqlite:... or postgres://... (add ?sslmode=require for TLS)",
    },
    Setting {
        variable: "BIND",
        flag: "bind",
        value_name: "ADDRESS",
        default: Some("127.0.0.1:3000"),
        help: "address to listen on",
    },
    Setting {
        variable: "PATH_PREFIX",
        flag: "path-prefix",
        value_name: "PREFIX",
        default: None,
        help: "serve the routes under a prefix, e.g. /api",
    },
    Setting {
        variable: "DEMO_SLOTS",
        flag: "demo-slots",
        value_name: "0|1",
        default: Some("1"),
        help: "0 skips the demo slots",
    },
    Setting {
        variable: "HOLD_TTL_SECONDS",
        flag: "hold-ttl-seconds",
        value_name: "SECONDS",
        default: Some("300"),
        help: "how long a hold lasts",
    },
    Setting {
        variable: "CACHE_PERIOD_SECONDS",
        flag: "cache-period-seconds",
        value_name: "SECONDS",
        default: Some("10"),
        help: "how long an availability listing is reused (0: every request reads the store)",
    },
    Setting {
        variable: "HEADER_TIMEOUT_SECONDS",
        flag: "header-timeout-seconds",
        value_name: "SECONDS",
        default: Some("10"),
        help: "a connection that has not sent a whole request head in this time is closed",
    },
    Setting {
        variable: "BODY_TIMEOUT_SECONDS",
        flag: "body-timeout-seconds",
        value_name: "SECONDS",
        default: Some("10"),
        help: "a body that has not arrived in this time gets 408",
    },
    Setting {
        variable: "MAX_CONNECTIONS",
        flag: "max-connections",
        value_name: "N",
        default: Some("512"),
        help: "connections served at once (lowered to fit the open-file limit); at the limit the \
               longest-idle keep-alive connection is closed for a newcomer",
    },
    Setting {
        variable: "SHUTDOWN_GRACE_SECONDS",
        flag: "shutdown-grace-seconds",
        value_name: "SECONDS",
        default: Some("10"),
        help: "after SIGINT/SIGTERM, time for requests in flight",
    },
    Setting {
        variable: "AVAILABILITY_PAGE_LIMIT",
        flag: "availability-page-limit",
        value_name: "N",
        default: Some("1000"),
        help: "most availability entries in one response (1-100000); more are paged",
    },
    Setting {
        variable: "REQUEST_LOG",
        flag: "request-log",
        value_name: "0|1",
        default: Some("1"),
        help: "0 turns off the one INFO line per request",
    },
    Setting {
        variable: "ADMIN_TOKEN",
        flag: "admin-token",
        value_name: "TOKEN",
        default: None,
        help: "enables the /admin routes, each needing Authorization: Bearer <TOKEN> \
               (16+ visible ASCII characters)",
    },
    Setting {
        variable: "OWNER_SECRET",
        flag: "owner-secret",
        value_name: "SECRET",
        default: None,
        help: "Owner-Id must then be <owner>.<hex HMAC-SHA256 of the owner under SECRET> \
               (32+ visible ASCII characters); unset, Owner-Id is trusted as sent",
    },
];

/// The command line of the server, from [`SETTINGS`]: a flag per setting, each also read from
/// its environment variable; `--help` and `--version`. Environment values are never shown.
pub fn command() -> Command {
    let mut command = Command::new("server")
        .version(env!("CARGO_PKG_VERSION"))
        .about("The slot_booking example HTTP server.")
        .after_help(
            "Each setting comes from its flag, else its environment variable, else its \
             default. Pass secrets (ADMIN_TOKEN, OWNER_SECRET) in the environment: a flag's \
             value shows in the process list.",
        );
    for setting in SETTINGS {
        let mut arg = Arg::new(setting.variable)
            .long(setting.flag)
            .env(setting.variable)
            .hide_env_values(true)
            .value_name(setting.value_name)
            .action(ArgAction::Set);
        arg = match setting.default {
            Some(default) => arg.help(setting.help).default_value(default),
            None => arg.help(format!("{} [default: none]", setting.help)),
        };
        command = command.arg(arg);
    }
    command
}

/// Why the command line does not start the server.
#[derive(Debug)]
pub enum CommandLineExit {
    /// `--help` or `--version`: this text goes to stdout, and the exit status is 0.
    Print(String),
    /// An argument the server does not take: one line for stderr; the exit status is 2.
    Usage(String),
    /// A setting that cannot be used: the exit status is 1.
    Invalid(ConfigError),
}

/// Every setting of the server, with the environment variable that sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `DATABASE_URL`: `sqlite:…` (default `sqlite://slot_booking.db`) or `postgres://…`.
    pub database_url: String,
    /// `BIND`: the address to listen on (default `127.0.0.1:3000`).
    pub bind: String,
    /// `PATH_PREFIX`: where the routes are mounted (default: the root). Empty, or `/` followed
    /// by segments of letters, digits, `-`, `_`, `.` and `~`, without a trailing `/`.
    pub path_prefix: String,
    /// `DEMO_SLOTS`: `0` skips the demo slots (default `1`).
    pub demo_slots: bool,
    /// `HOLD_TTL_SECONDS`: how long a hold lasts before it expires (default 300).
    pub hold_ttl: Duration,
    /// `CACHE_PERIOD_SECONDS`: how long an availability listing is served before it is read
    /// again (default 10; `0` reads the store on every request).
    pub cache_period: Duration,
    /// `HEADER_TIMEOUT_SECONDS`: a connection that has not sent a whole request head within
    /// this time, whether new or idle between requests, is closed (default 10).
    pub header_timeout: Duration,
    /// `BODY_TIMEOUT_SECONDS`: a request whose body has not arrived within this time gets 408
    /// (default 10).
    pub body_timeout: Duration,
    /// `MAX_CONNECTIONS`: connections served at once; more wait to be accepted (default 512,
    /// lowered to fit the process's open-file limit).
    pub max_connections: usize,
    /// `SHUTDOWN_GRACE_SECONDS`: after SIGTERM or SIGINT, how long requests in flight may take
    /// to finish before the remaining connections are closed (default 10).
    pub shutdown_grace: Duration,
    /// `ADMIN_TOKEN`: the bearer token of the administration routes, at least
    /// [`AdminToken::MIN_LEN`] visible ASCII characters (default: unset, and the routes are not
    /// mounted at all).
    pub admin_token: Option<AdminToken>,
    /// `AVAILABILITY_PAGE_LIMIT`: the most entries one `GET /slots/availability` response
    /// lists, and the largest `limit` it accepts (default 1000, at most
    /// [`MAX_AVAILABILITY_PAGE_LIMIT`]); more entries are in the next pages.
    pub availability_page_limit: u32,
    /// `REQUEST_LOG`: `0` turns off the one `INFO` line per request (default `1`). The line
    /// costs about a quarter of a cached availability request's CPU (`benches/http.sh`).
    pub request_log: bool,
    /// `OWNER_SECRET`: when set, an `Owner-Id` header must carry the owner and its signature
    /// under this secret ([`OwnerSecret`]), and anything else is refused; unset (the default),
    /// `Owner-Id` is taken as sent.
    pub owner_secret: Option<OwnerSecret>,
}

/// The largest `AVAILABILITY_PAGE_LIMIT` accepted.
pub const MAX_AVAILABILITY_PAGE_LIMIT: u32 = 100_000;

impl Default for Config {
    fn default() -> Self {
        Config {
            database_url: "sqlite://slot_booking.db".to_owned(),
            bind: "127.0.0.1:3000".to_owned(),
            path_prefix: String::new(),
            demo_slots: true,
            hold_ttl: Duration::from_secs(300),
            cache_period: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_connections: 512,
            shutdown_grace: Duration::from_secs(10),
            admin_token: None,
            availability_page_limit: 1000,
            request_log: true,
            owner_secret: None,
        }
    }
}

/// A setting that cannot be used, with the variable that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The environment variable.
    pub variable: &'static str,
    /// What is wrong with its value.
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.variable, self.problem)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// The configuration in the process's environment (the command line aside).
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_vars(|name| std::env::var(name).ok())
    }

    /// The configuration `args` (the program's name first, as in [`std::env::args_os`]) and
    /// the process's environment give: each setting from its flag, else its variable
    /// ([`command`]), then checked like [`from_vars`](Config::from_vars). Nothing is opened.
    pub fn from_command_line<I, T>(args: I) -> Result<Config, CommandLineExit>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let matches = command().try_get_matches_from(args).map_err(|error| {
            use clap::error::ErrorKind;
            match error.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    CommandLineExit::Print(error.render().to_string())
                }
                _ => {
                    let rendered = error.render().to_string();
                    let first = rendered.lines().next().unwrap_or("error: bad arguments");
                    CommandLineExit::Usage(format!("{first} (see --help)"))
                }
            }
        })?;
        Config::from_vars(|name| given(&matches, name)).map_err(CommandLineExit::Invalid)
    }

    /// The configuration `var` gives (a variable's value, `None` when unset).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let defaults = Config::default();
        let seconds = |variable: &'static str, default: Duration, zero_ok: bool| {
            var(variable).map_or(Ok(default), |raw| parse_seconds(variable, &raw, zero_ok))
        };
        let config = Config {
            database_url: var("DATABASE_URL").unwrap_or(defaults.database_url),
            bind: var("BIND").unwrap_or(defaults.bind),
            path_prefix: var("PATH_PREFIX").unwrap_or_default(),
            demo_slots: match var("DEMO_SLOTS").as_deref() {
                None | Some("1") => true,
                Some("0") => false,
                Some(other) => return Err(error("DEMO_SLOTS", format!("{other:?} is not 0 or 1"))),
            },
            request_log: match var("REQUEST_LOG").as_deref() {
                None | Some("1") => true,
                Some("0") => false,
                Some(other) => {
                    return Err(error("REQUEST_LOG", format!("{other:?} is not 0 or 1")))
                }
            },
            hold_ttl: seconds("HOLD_TTL_SECONDS", defaults.hold_ttl, false)?,
            cache_period: seconds("CACHE_PERIOD_SECONDS", defaults.cache_period, true)?,
            header_timeout: seconds("HEADER_TIMEOUT_SECONDS", defaults.header_timeout, false)?,
            body_timeout: seconds("BODY_TIMEOUT_SECONDS", defaults.body_timeout, false)?,
            max_connections: match var("MAX_CONNECTIONS") {
                None => fit_to_file_limit(defaults.max_connections),
                Some(raw) => match raw.parse::<usize>() {
                    Ok(n) if n > 0 => n,
                    _ => {
                        return Err(error(
                            "MAX_CONNECTIONS",
                            format!("{raw:?} is not a positive whole number"),
                        ))
                    }
                },
            },
            shutdown_grace: seconds("SHUTDOWN_GRACE_SECONDS", defaults.shutdown_grace, true)?,
            admin_token: var("ADMIN_TOKEN")
                .map(|raw| AdminToken::new(raw).map_err(|problem| error("ADMIN_TOKEN", problem)))
                .transpose()?,
            owner_secret: var("OWNER_SECRET")
                .map(|raw| OwnerSecret::new(raw).map_err(|problem| error("OWNER_SECRET", problem)))
                .transpose()?,
            availability_page_limit: match var("AVAILABILITY_PAGE_LIMIT") {
                None => defaults.availability_page_limit,
                Some(raw) => match raw.parse::<u32>() {
                    Ok(n) if (1..=MAX_AVAILABILITY_PAGE_LIMIT).contains(&n) => n,
                    _ => {
                        return Err(error(
                            "AVAILABILITY_PAGE_LIMIT",
                            format!(
                                "{raw:?} is not a whole number between 1 and \
                                 {MAX_AVAILABILITY_PAGE_LIMIT}"
                            ),
                        ))
                    }
                },
            },
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

/// The value of the setting `variable` from its flag or its environment variable; `None` when
/// neither is given (its default is [`Config::from_vars`]'s).
fn given(matches: &ArgMatches, variable: &str) -> Option<String> {
    match matches.value_source(variable) {
        Some(ValueSource::CommandLine | ValueSource::EnvVariable) => {
            matches.get_one::<String>(variable).cloned()
        }
        _ => None,
    }
}

fn error(variable: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        variable,
        problem: problem.into(),
    }
}

fn parse_seconds(
    variable: &'static str,
    raw: &str,
    zero_ok: bool,
) -> Result<Duration, ConfigError> {
    match raw.parse::<u64>() {
        Ok(0) if !zero_ok => Err(error(variable, "must be at least 1")),
        // A year bounds every setting: beyond it, a typo is likelier than an intent.
        Ok(n) if n <= 366 * 24 * 3600 => Ok(Duration::from_secs(n)),
        _ => Err(error(
            variable,
            format!("{raw:?} is not a whole number of seconds (at most a year)"),
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

fn validate_database_url(url: &str) -> Result<(), ConfigError> {
    let known = ["sqlite:", "postgres:", "postgresql:"];
    if known.iter().any(|scheme| url.starts_with(scheme)) {
        Ok(())
    } else {
        Err(error(
            "DATABASE_URL",
            "must start with sqlite:, postgres: or postgresql:",
        ))
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
            ("DATABASE_URL", "mysql://db"),
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
    fn every_setting_is_documented_in_settings_with_its_flag() {
        // Every variable `from_vars` reads is in SETTINGS, and nothing else is.
        let read = std::cell::RefCell::new(Vec::new());
        let _ = Config::from_vars(|name| {
            read.borrow_mut().push(name.to_owned());
            None
        });
        let mut read = read.into_inner();
        read.sort();
        read.dedup();
        let mut documented: Vec<String> = SETTINGS.iter().map(|s| s.variable.to_owned()).collect();
        documented.sort();
        assert_eq!(read, documented);
        for setting in SETTINGS {
            assert_eq!(
                setting.flag,
                setting.variable.to_ascii_lowercase().replace('_', "-")
            );
        }
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

    /// `server` and `args`, every setting given as a flag so that the test process's own
    /// environment (`DATABASE_URL`, say) plays no part.
    fn command_line(args: &[&str]) -> Result<Config, CommandLineExit> {
        let mut all = vec!["server".to_owned()];
        for setting in SETTINGS {
            let flag = format!("--{}", setting.flag);
            if !args
                .iter()
                .any(|arg| arg.split('=').next() == Some(flag.as_str()))
            {
                let value = match setting.variable {
                    "PATH_PREFIX" => Some(""),
                    "ADMIN_TOKEN" | "OWNER_SECRET" => None,
                    _ => setting.default,
                };
                if let Some(value) = value {
                    all.push(format!("{flag}={value}"));
                }
            }
        }
        all.extend(args.iter().map(|arg| arg.to_string()));
        Config::from_command_line(all)
    }

    #[test]
    fn flags_set_what_their_variables_set() {
        let config = command_line(&[
            "--database-url",
            "postgres://db/app",
            "--bind=0.0.0.0:8080",
            "--path-prefix=/api",
            "--demo-slots=0",
            "--hold-ttl-seconds=60",
            "--max-connections=7",
            "--admin-token=s3cret-admin-token-0123",
            "--owner-secret=0123456789abcdef0123456789abcdef",
        ])
        .unwrap();
        assert_eq!(config.database_url, "postgres://db/app");
        assert_eq!(config.bind, "0.0.0.0:8080");
        assert_eq!(config.path_prefix, "/api");
        assert!(!config.demo_slots);
        assert_eq!(config.hold_ttl, Duration::from_secs(60));
        assert_eq!(config.max_connections, 7);
        assert!(config.admin_token.is_some());
        assert!(config.owner_secret.is_some());
    }

    #[test]
    fn a_bad_flag_value_names_its_variable_as_the_environment_would() {
        for (flag, value) in [
            ("--hold-ttl-seconds", "0"),
            ("--max-connections", "lots"),
            ("--owner-secret", "short"),
            ("--bind", "localhost"),
        ] {
            match command_line(&[&format!("{flag}={value}")]) {
                Err(CommandLineExit::Invalid(error)) => {
                    assert_eq!(
                        error.variable,
                        flag[2..].to_ascii_uppercase().replace('-', "_")
                    )
                }
                other => panic!("{flag}={value}: {other:?}"),
            }
        }
    }

    #[test]
    fn unknown_arguments_are_one_line_and_help_lists_every_setting() {
        for args in [&["--bogus"][..], &["serve"], &["--bind"], &["-x"]] {
            match command_line(args) {
                Err(CommandLineExit::Usage(line)) => {
                    assert!(line.starts_with("error: "), "{line}");
                    assert!(!line.contains('\n'), "{line}");
                }
                other => panic!("{args:?}: {other:?}"),
            }
        }
        for args in [&["--help"][..], &["-h"]] {
            let Err(CommandLineExit::Print(help)) = command_line(args) else {
                panic!("{args:?} did not print help");
            };
            for setting in SETTINGS {
                let default = setting.default.unwrap_or("none");
                let line = help
                    .lines()
                    .skip_while(|line| !line.contains(&format!("--{} <", setting.flag)))
                    .nth(1)
                    .unwrap_or_else(|| panic!("no --{} in {help}", setting.flag));
                assert!(line.contains(setting.help), "{line}");
                assert!(
                    line.contains(&format!("[env: {}]", setting.variable)),
                    "{line}"
                );
                assert!(line.contains(&format!("[default: {default}]")), "{line}");
            }
        }
        let Err(CommandLineExit::Print(version)) = command_line(&["--version"]) else {
            panic!("--version did not print");
        };
        assert_eq!(
            version.trim(),
            format!("server {}", env!("CARGO_PKG_VERSION"))
        );
    }

    #[test]
    fn the_open_file_limit_lowers_the_connection_limit() {
        let fitted = fit_to_file_limit(usize::MAX);
        assert!(fitted < usize::MAX, "no open-file limit was read");
        assert_eq!(fit_to_file_limit(1), 1);
    }
}
