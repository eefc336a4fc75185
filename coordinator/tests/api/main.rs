//! Black-box tests of the coordinator's HTTP API, against a real PostgreSQL
//! database created for each test (and a real RabbitMQ for readiness).

mod auth;
mod common;
mod health;
mod methods;
mod migrations;
mod registrations;
mod topics;
mod validation;
