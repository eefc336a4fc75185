//! The loads of the storm after an alert, by name: what the phones, the
//! newsroom's dashboards and a probe ask of the coordinator.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Load {
    /// `PUT /api/v1/registrations/{token}`, two topics each, new and
    /// changed tokens by turns.
    RegistrationWrites,
    /// `GET /api/v1/registrations/{token}`, random over the read tokens.
    RegistrationReads,
    /// `POST /api/v1/receipts`, receipts of the send's audience in batches.
    ReceiptsBatched,
    /// `POST /api/v1/receipts`, one receipt a request.
    ReceiptsSingle,
    /// Dashboards: each poller asks the send's status and curve once a
    /// second, with `If-None-Match`.
    Pollers,
    /// `GET /healthz`: the HTTP ceiling of one coordinator.
    Healthz,
}

impl Load {
    pub const ALL: [Load; 6] = [
        Load::RegistrationWrites,
        Load::RegistrationReads,
        Load::ReceiptsBatched,
        Load::ReceiptsSingle,
        Load::Pollers,
        Load::Healthz,
    ];

    /// As the report and the command line spell it.
    pub fn name(self) -> &'static str {
        match self {
            Load::RegistrationWrites => "registration-writes",
            Load::RegistrationReads => "registration-reads",
            Load::ReceiptsBatched => "receipts-batched",
            Load::ReceiptsSingle => "receipts-single",
            Load::Pollers => "pollers",
            Load::Healthz => "healthz",
        }
    }

    /// As the README's table says it.
    pub fn label(self) -> &'static str {
        match self {
            Load::RegistrationWrites => "registration writes (`PUT`, 2 topics)",
            Load::RegistrationReads => "registration reads (`GET`)",
            Load::ReceiptsBatched => "receipts, batches",
            Load::ReceiptsSingle => "receipts, one a request",
            Load::Pollers => "status + curve pollers",
            Load::Healthz => "`GET /healthz`",
        }
    }
}
