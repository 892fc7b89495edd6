//! The settings table ([`SETTINGS`]) and the command line built from it ([`command`],
//! [`Config::from_command_line`]).

use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

use super::{Config, ConfigError};

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
        help: "sqlite:..., postgres://... or mysql://... (TLS: ?sslmode=require on PostgreSQL, \
               ?ssl-mode=required on MariaDB/MySQL)",
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
        variable: "HISTORY_RETENTION_SECONDS",
        flag: "history-retention-seconds",
        value_name: "SECONDS",
        default: Some("604800"),
        help: "cancelled and expired holds, and events of the log every consumer has \
               acknowledged, are deleted once this old, so the event log stays bounded \
               (0: kept forever)",
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

impl Config {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
}
