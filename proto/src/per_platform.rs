//! A value for every platform ([`PerPlatform`]): counts, rates and flags
//! kept per platform without naming one, so a new platform in
//! [`Platform::ALL`] needs no new field anywhere. As JSON it is an object
//! keyed by platform name, every platform present (0 / false / … when
//! nothing happened on it).

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Add, Index, IndexMut};

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::platform::Platform;

/// One `T` for each platform of [`Platform::ALL`], indexed by [`Platform`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PerPlatform<T>([T; Platform::COUNT]);

impl<T> PerPlatform<T> {
    /// The value `f` gives for each platform.
    pub fn from_fn(f: impl FnMut(Platform) -> T) -> Self {
        Self(Platform::ALL.map(f))
    }

    /// Each platform with its value, in [`Platform::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (Platform, &T)> {
        Platform::ALL.into_iter().zip(self.0.iter())
    }

    /// The values, in [`Platform::ALL`] order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.0.iter()
    }

    /// `f` of each platform's value.
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> PerPlatform<U> {
        PerPlatform(self.0.map(f))
    }

    /// `f` of each platform's pair of values.
    pub fn zip_with<U, V>(self, other: PerPlatform<U>, mut f: impl FnMut(T, U) -> V) -> PerPlatform<V> {
        let mut others = other.0.into_iter();
        PerPlatform(self.0.map(|value| match others.next() {
            Some(other) => f(value, other),
            // Both arrays hold `Platform::COUNT` values.
            None => unreachable!("per-platform arrays have one length"),
        }))
    }

    /// True when `f` holds for some platform's value.
    pub fn any(&self, f: impl FnMut(&T) -> bool) -> bool {
        self.0.iter().any(f)
    }
}

impl<T: Copy + std::iter::Sum<T>> PerPlatform<T> {
    /// The values of every platform added up.
    pub fn total(&self) -> T {
        self.0.iter().copied().sum()
    }
}

impl<T: Default> Default for PerPlatform<T> {
    fn default() -> Self {
        Self::from_fn(|_| T::default())
    }
}

impl<T> Index<Platform> for PerPlatform<T> {
    type Output = T;

    fn index(&self, platform: Platform) -> &T {
        &self.0[platform.index()]
    }
}

impl<T> IndexMut<Platform> for PerPlatform<T> {
    fn index_mut(&mut self, platform: Platform) -> &mut T {
        &mut self.0[platform.index()]
    }
}

/// Platform by platform.
impl<T: Add<Output = T>> Add for PerPlatform<T> {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        self.zip_with(other, |a, b| a + b)
    }
}

impl<T: fmt::Debug> fmt::Debug for PerPlatform<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(p, v)| (p.as_str(), v)))
            .finish()
    }
}

/// An object keyed by platform name, every platform present.
impl<T: Serialize> Serialize for PerPlatform<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(Platform::COUNT))?;
        for (platform, value) in self.iter() {
            map.serialize_entry(platform.as_str(), value)?;
        }
        map.end()
    }
}

/// From an object keyed by platform name: a platform left out is
/// `T::default()`; a name that is no platform of this build, or one given
/// twice, is refused (never dropped: a count on an unknown platform must
/// not vanish from a total).
impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for PerPlatform<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(PerPlatformVisitor(PhantomData))
    }
}

struct PerPlatformVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de> + Default> Visitor<'de> for PerPlatformVisitor<T> {
    type Value = PerPlatform<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object keyed by platform name")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut values: PerPlatform<Option<T>> = PerPlatform::from_fn(|_| None);
        while let Some(platform) = map.next_key::<Platform>()? {
            if values[platform].is_some() {
                return Err(serde::de::Error::custom(format_args!(
                    "platform {platform} given twice"
                )));
            }
            values[platform] = Some(map.next_value()?);
        }
        Ok(values.map(Option::unwrap_or_default))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_platform_has_its_own_slot() {
        let mut counts = PerPlatform::<u64>::default();
        for (n, platform) in Platform::ALL.into_iter().enumerate() {
            counts[platform] += n as u64 + 1;
        }
        for (n, (platform, count)) in counts.iter().enumerate() {
            assert_eq!(platform, Platform::ALL[n]);
            assert_eq!(*count, n as u64 + 1);
            assert_eq!(counts[platform], n as u64 + 1);
        }
        let count = Platform::COUNT as u64;
        assert_eq!(counts.total(), count * (count + 1) / 2);
    }

    #[test]
    fn it_is_an_object_keyed_by_platform_name_with_every_platform() {
        let mut counts = PerPlatform::<u64>::default();
        counts[Platform::Android] = 7;
        let json = serde_json::to_value(counts).unwrap();
        let object = json.as_object().unwrap();
        assert_eq!(object.len(), Platform::COUNT);
        for platform in Platform::ALL {
            let expected = if platform == Platform::Android { 7 } else { 0 };
            assert_eq!(object[platform.as_str()], expected, "{json}");
        }
        assert_eq!(serde_json::from_value::<PerPlatform<u64>>(json).unwrap(), counts);
    }

    #[test]
    fn a_platform_left_out_reads_as_default() {
        let counts: PerPlatform<u64> = serde_json::from_str(r#"{"android": 3}"#).unwrap();
        assert_eq!(counts[Platform::Android], 3);
        assert_eq!(counts[Platform::Ios], 0);
        assert_eq!(
            serde_json::from_str::<PerPlatform<u64>>("{}").unwrap(),
            PerPlatform::default()
        );
    }

    #[test]
    fn an_unknown_or_repeated_platform_is_refused_by_name() {
        let err = serde_json::from_str::<PerPlatform<u64>>(r#"{"ios": 1, "windows": 2}"#).unwrap_err();
        assert!(err.to_string().contains("windows"), "{err}");
        let err = serde_json::from_str::<PerPlatform<u64>>(r#"{"ios": 1, "ios": 2}"#).unwrap_err();
        assert!(err.to_string().contains("given twice"), "{err}");
    }

    #[test]
    fn debug_names_the_platforms() {
        let flags = PerPlatform::from_fn(|p| p == Platform::Ios);
        assert_eq!(
            format!("{flags:?}"),
            r#"{"ios": true, "android": false, "web": false}"#
        );
    }

    proptest! {
        #[test]
        fn map_zip_and_add_work_platform_by_platform(a in any::<[u32; Platform::COUNT]>(), b in any::<[u32; Platform::COUNT]>()) {
            let a = PerPlatform::from_fn(|p| u64::from(a[p.index()]));
            let b = PerPlatform::from_fn(|p| u64::from(b[p.index()]));
            let sum = a + b;
            let doubled = a.map(|n| n * 2);
            let max = a.zip_with(b, u64::max);
            for platform in Platform::ALL {
                prop_assert_eq!(sum[platform], a[platform] + b[platform]);
                prop_assert_eq!(doubled[platform], a[platform] * 2);
                prop_assert_eq!(max[platform], a[platform].max(b[platform]));
            }
            prop_assert_eq!(sum.total(), a.total() + b.total());
            let json = serde_json::to_string(&sum).unwrap();
            prop_assert_eq!(serde_json::from_str::<PerPlatform<u64>>(&json).unwrap(), sum);
        }
    }
}
