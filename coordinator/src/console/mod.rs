//! The newsroom console at `/console/`: a page an editor signs in to with
//! an API key to compose, send or schedule, follow and cancel alerts and
//! look back at past ones, and to start, update and end Live Activities.
//!
//! The page is static (HTML, CSS and a few JavaScript modules in
//! `coordinator/console/`, embedded in the binary by [`assets`], and the
//! list of platforms written from proto's by [`platforms`]); it talks
//! to the JSON API with the session cookie of [`session`]. Every console
//! response carries a strict Content-Security-Policy: scripts, styles and
//! connections from this origin only, no inline script, no framing
//! ([`routes`]).

pub mod assets;
pub mod platforms;
pub mod routes;
pub mod session;

use clarion_runtime::PgPool;

use crate::config::ConsoleSettings;

/// What the console's handlers share.
pub struct Console {
    pub pool: PgPool,
    pub settings: ConsoleSettings,
}
