//! The OpenAPI schema of a response object that holds one property per
//! platform (a flattened [`clarion_proto::PerPlatform`]) beside fixed ones: written by hand,
//! since the platforms are data, with what the derive would have written
//! for the same fields.

use clarion_proto::Platform;
use utoipa::openapi::schema::{ObjectBuilder, Schema};
use utoipa::openapi::{RefOr, Type};
use utoipa::{PartialSchema, ToSchema};

/// Properties of an object: name and schema.
pub type Properties<'a> = Vec<(&'a str, RefOr<Schema>)>;

/// An object described as `description` (if any), with the required properties
/// `before`, a required property per platform of schema `value`, then the
/// required properties `after`.
pub fn object_with_platforms(
    description: Option<&str>,
    before: Properties<'_>,
    value: impl Fn() -> RefOr<Schema>,
    after: Properties<'_>,
) -> RefOr<Schema> {
    let platforms = Platform::ALL.map(|platform| (platform.as_str(), value()));
    let properties = before.into_iter().chain(platforms).chain(after);
    properties
        .fold(
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .description(description),
            |object, (name, schema)| object.property(name, schema).required(name),
        )
        .into()
}

/// A reference to the component schema of `T`.
pub fn reference<T: ToSchema>() -> RefOr<Schema> {
    RefOr::Ref(utoipa::openapi::Ref::from_schema_name(T::name()))
}

/// The schema of a count (what the derive writes for a `u64` field).
pub fn count() -> RefOr<Schema> {
    u64::schema()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_platform_and_fixed_property_is_there_and_required() {
        let schema = object_with_platforms(
            Some("d"),
            vec![("topic", count())],
            count,
            vec![("total", count())],
        );
        let json = serde_json::to_value(&schema).unwrap();
        let required: Vec<&str> = json["required"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|name| name.as_str())
            .collect();
        let expected: Vec<&str> = std::iter::once("topic")
            .chain(Platform::ALL.into_iter().map(Platform::as_str))
            .chain(["total"])
            .collect();
        assert_eq!(required, expected);
        for name in expected {
            assert_eq!(
                json["properties"][name],
                serde_json::to_value(count()).unwrap(),
                "{name}"
            );
        }
        assert_eq!(json["description"], "d");
    }
}
