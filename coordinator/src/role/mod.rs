//! The coordinator's roles (`--role`, `CLARION_ROLE`), in the spirit of
//! quickwit's enabled services: one binary, deployed as app-facing
//! coordinators that scale with the phones and control coordinators that
//! run the send path.
//!
//! - `api` serves what apps and dashboards call: registrations, receipts,
//!   and the reads of notifications (every GET under
//!   `/api/v1/notifications`: status, curve, history, held tokens). It
//!   needs PostgreSQL only (no broker link, no background loop besides its
//!   group commits), and its readiness says so.
//! - `control` serves everything else — sends, cancels, replacements, topic
//!   sizes, releasing or discarding held tokens, the audit log, the console
//!   — and the same reads (the console shows them, and a router that
//!   matches paths but not methods cannot tell `GET
//!   /api/v1/notifications/{id}` from its `PUT`), and runs every background
//!   loop: the job relay, the scheduler, the watchdog, hygiene, the receipts
//!   settler and the queue consumers ([`loops`]).
//!
//! Both keep `/healthz`, `/readyz`, `/metrics` and the OpenAPI document
//! (always the whole API). The default runs both, as one coordinator did
//! before roles. A request for a route of the role a coordinator does not
//! run is answered 421 (Misdirected Request), naming the role that serves it.

pub mod loops;

use std::fmt;

/// One role a coordinator may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The app-facing API: registrations, receipts, reads of notifications.
    Api,
    /// Everything else of the API, and every background loop.
    Control,
}

impl Role {
    pub const ALL: [Role; 2] = [Role::Api, Role::Control];

    /// The name in `--role` and in answers.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Api => "api",
            Role::Control => "control",
        }
    }

    fn named(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.as_str() == name)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The roles one coordinator runs: one of them, or both (the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
    api: bool,
    control: bool,
}

impl Roles {
    /// Both roles: one coordinator serves the whole API and runs every loop.
    pub const BOTH: Roles = Roles {
        api: true,
        control: true,
    };

    /// Only `role`.
    pub fn only(role: Role) -> Roles {
        Roles {
            api: role == Role::Api,
            control: role == Role::Control,
        }
    }

    /// Whether this coordinator runs `role`.
    pub fn runs(self, role: Role) -> bool {
        match role {
            Role::Api => self.api,
            Role::Control => self.control,
        }
    }

    /// The role this coordinator does not run, if it runs only one: the one
    /// that serves what this one refuses.
    pub fn missing(self) -> Option<Role> {
        Role::ALL.into_iter().find(|role| !self.runs(*role))
    }

    /// Reads `--role`: a comma-separated list of `api` and `control`
    /// (`api`, `control`, `api,control`), in any order and case, spaces
    /// around names allowed; a name twice is the same as once.
    pub fn parse(list: &str) -> Result<Roles, String> {
        let mut roles = Roles {
            api: false,
            control: false,
        };
        for name in list.split(',').map(str::trim) {
            match Role::named(&name.to_ascii_lowercase()) {
                Some(Role::Api) => roles.api = true,
                Some(Role::Control) => roles.control = true,
                None if name.is_empty() => {
                    return Err(format!(
                        "{list:?} holds an empty role name; expected `api`, `control` or `api,control`"
                    ));
                }
                None => {
                    return Err(format!(
                        "unknown role {name:?}; expected `api`, `control` or `api,control`"
                    ));
                }
            }
        }
        Ok(roles)
    }
}

impl Default for Roles {
    fn default() -> Self {
        Roles::BOTH
    }
}

impl fmt::Display for Roles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Role::ALL
            .into_iter()
            .filter(|role| self.runs(*role))
            .map(Role::as_str)
            .collect();
        f.write_str(&names.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::{Role, Roles};

    #[test]
    fn one_role_or_a_list_of_both() {
        assert_eq!(Roles::parse("api"), Ok(Roles::only(Role::Api)));
        assert_eq!(Roles::parse("control"), Ok(Roles::only(Role::Control)));
        for both in [
            "api,control",
            "control,api",
            " api , control ",
            "API,Control",
            "api,control,api",
        ] {
            assert_eq!(Roles::parse(both), Ok(Roles::BOTH), "{both:?}");
        }
        assert_eq!(Roles::parse("api,api"), Ok(Roles::only(Role::Api)));
    }

    #[test]
    fn unknown_or_empty_names_are_refused_with_the_expected_ones() {
        for wrong in [
            "",
            "apis",
            "api,",
            ",control",
            "api;control",
            "both",
            "api,,control",
        ] {
            let err = Roles::parse(wrong).expect_err(wrong);
            assert!(err.contains("`api,control`"), "{wrong:?}: {err}");
        }
        assert!(Roles::parse("worker").unwrap_err().contains("\"worker\""));
    }

    #[test]
    fn written_as_parsed_and_the_missing_role_named() {
        for roles in [Roles::BOTH, Roles::only(Role::Api), Roles::only(Role::Control)] {
            assert_eq!(Roles::parse(&roles.to_string()), Ok(roles));
        }
        assert_eq!(Roles::BOTH.to_string(), "api,control");
        assert_eq!(Roles::BOTH.missing(), None);
        assert_eq!(Roles::only(Role::Api).missing(), Some(Role::Control));
        assert_eq!(Roles::only(Role::Control).missing(), Some(Role::Api));
        assert!(Roles::only(Role::Api).runs(Role::Api) && !Roles::only(Role::Api).runs(Role::Control));
    }
}
