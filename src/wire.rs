//! Enums whose values travel as exact strings (swagger enums, the Go installer's `--role`): one
//! definition gives the variants, their wire strings, `as_str`, `Display`, `FromStr` and serde,
//! so the rest of the program compares typed values and only the edges see text.
//!
//! Two shapes:
//! - closed (`enum Name: "what"`): `Copy`; a string that is not a listed value is an
//!   [`UnknownValue`] error. For what we send, where a wrong value must not compile.
//! - open (`enum Name: open`): an unknown string is kept verbatim in `Other`, so a newer service
//!   (or a role the Go installer passes through untouched) never fails a parse.

/// A string that is not one of the values the API defines for this enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub struct UnknownValue {
    /// What was being parsed ("host stage", "logs state").
    pub kind: &'static str,
    /// The rejected input.
    pub value: String,
}

/// Defines a wire enum; see the module docs.
macro_rules! wire_enum {
    // Both forms print and serialize as their wire string.
    (@as_text $name:ident) => {
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }
    };

    (
        $(#[$meta:meta])*
        pub enum $name:ident: $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration (swagger) order.
            pub const ALL: [$name; [$($wire),+].len()] = [$($name::$variant),+];

            /// The exact wire string.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $wire, )+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::wire::UnknownValue;

            /// Exact, case-sensitive match on the wire string.
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $( $wire => Ok($name::$variant), )+
                    _ => Err($crate::wire::UnknownValue {
                        kind: $what,
                        value: s.to_string(),
                    }),
                }
            }
        }

        $crate::wire::wire_enum!(@as_text $name);

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let s = String::deserialize(deserializer)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };

    (
        $(#[$meta:meta])*
        pub enum $name:ident: open {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value not listed here, kept verbatim (never one of the listed strings).
            Other(String),
        }

        impl $name {
            /// Every listed value, in declaration (swagger) order.
            pub const KNOWN: [$name; [$($wire),+].len()] = [$($name::$variant),+];

            /// The exact wire string.
            pub fn as_str(&self) -> &str {
                match self {
                    $( $name::$variant => $wire, )+
                    $name::Other(s) => s,
                }
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $( $wire => $name::$variant, )+
                    _ => $name::Other(s.to_string()),
                }
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                match $name::from(s.as_str()) {
                    $name::Other(_) => $name::Other(s),
                    known => known,
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = std::convert::Infallible;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Ok($name::from(s))
            }
        }

        $crate::wire::wire_enum!(@as_text $name);

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                String::deserialize(deserializer).map($name::from)
            }
        }
    };
}

pub(crate) use wire_enum;

#[cfg(test)]
mod tests {
    // The macro declares `pub` enums, as the service's are; these test ones stay private here.
    #![allow(unreachable_pub)]

    wire_enum! {
        /// A closed test enum.
        pub enum Closed: "closed thing" {
            One = "one",
            TwoWords = "two words",
        }
    }

    wire_enum! {
        /// An open test enum.
        pub enum Open: open {
            Alpha = "alpha",
            Beta = "beta",
        }
    }

    #[test]
    fn closed_round_trips_and_rejects_the_rest() {
        assert_eq!(Closed::ALL, [Closed::One, Closed::TwoWords]);
        for v in Closed::ALL {
            assert_eq!(v.as_str().parse::<Closed>(), Ok(v));
            let json = serde_json::to_string(&v).unwrap();
            assert_eq!(json, format!("\"{v}\""));
            assert_eq!(serde_json::from_str::<Closed>(&json).unwrap(), v);
        }
        let e = "One".parse::<Closed>().unwrap_err();
        assert_eq!(e.to_string(), "unknown closed thing \"One\"");
        assert!(serde_json::from_str::<Closed>("\"three\"").is_err());
    }

    #[test]
    fn open_keeps_unknown_values_verbatim() {
        assert_eq!(Open::KNOWN, [Open::Alpha, Open::Beta]);
        assert_eq!(Open::from("beta"), Open::Beta);
        assert_eq!(Open::from("beta".to_string()), Open::Beta);
        assert_eq!(Open::from("Beta"), Open::Other("Beta".into()));
        assert_eq!(Open::from(String::new()), Open::Other(String::new()));
        let o: Open = serde_json::from_str("\"gamma\"").unwrap();
        assert_eq!(o, Open::Other("gamma".into()));
        assert_eq!(o.as_str(), "gamma");
        assert_eq!(serde_json::to_string(&o).unwrap(), "\"gamma\"");
        assert_eq!("alpha".parse::<Open>(), Ok(Open::Alpha));
        assert_eq!(Open::Alpha.to_string(), "alpha");
    }
}
