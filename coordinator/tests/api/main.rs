//! Black-box tests of the coordinator's HTTP API, against a real PostgreSQL
//! database created for each test (and a real RabbitMQ for readiness).

mod apps;
mod audit;
mod auth;
mod common;
mod console;
mod health;
mod held;
mod hygiene;
mod listing;
mod methods;
mod migrations;
mod openapi_doc;
mod posture;
mod push_to_start;
mod receipts;
mod registrations;
mod reports;
mod roles;
mod scheduled;
mod topics;
mod validation;
mod web_registrations;
