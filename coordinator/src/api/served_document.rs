//! The OpenAPI document as served: the generated one with the apps this
//! installation serves now written in, rebuilt when they change. Apart
//! from the generated document (`openapi.rs`, which names every handler),
//! so the state the handlers share does not depend on them.

use std::sync::{Arc, Mutex};

use clarion_runtime::apps::AppsFile;
use serde_json::Value;

/// The served document: generated from the annotations, with the limits
/// the service enforces written in (`max_topics_per_device` is a setting)
/// and `app` given as the apps this installation serves now. The apps
/// file may change while the coordinator runs (see
/// [`clarion_runtime::apps`]): the document is rebuilt when the apps it
/// lists are no longer those served, so a schema-valid `app` is always
/// one the service accepts.
pub struct ServedDocument {
    /// The document with the limits, before the apps are written in.
    generated: Value,
    apps: Arc<AppsFile>,
    /// The apps of the last document built, and that document.
    built: Mutex<(Vec<String>, Arc<str>)>,
}

impl ServedDocument {
    /// Serves `generated` (`openapi::generated`) with the
    /// apps of `apps`.
    pub fn new(generated: Value, apps: Arc<AppsFile>) -> Self {
        Self {
            generated,
            apps,
            built: Mutex::new((Vec::new(), Arc::from(""))),
        }
    }

    /// The document for the apps served now.
    pub fn current(&self) -> Arc<str> {
        let served = self.apps.ids();
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if built.0 != served || built.1.is_empty() {
            let mut doc = self.generated.clone();
            super::limits::state_apps(&mut doc, &served);
            *built = (served, Arc::from(doc.to_string()));
        }
        built.1.clone()
    }
}
