//! Where a job computes: the CPU backend or a GPU.
//!
//! A device is part of what a job computes (GPU kernels are not bit-identical to the CPU ones),
//! so it is part of a job's identity and of the tolerance table a cell gets by default.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// `cpu`, `gpu` (the first adapter) or `gpu:N` (the N-th, as `meshparity list devices` numbers
/// them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Device {
    #[default]
    Cpu,
    Gpu(u32),
}

impl Device {
    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }

    pub fn is_gpu(&self) -> bool {
        !self.is_cpu()
    }

    /// Spellings accepted, for messages.
    pub const FORMS: &'static str = "\"cpu\", \"gpu\" or \"gpu:N\"";
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Gpu(0) => f.write_str("gpu"),
            Device::Gpu(n) => write!(f, "gpu:{n}"),
        }
    }
}

/// Why a device string was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a device; expected {forms}", forms = Device::FORMS)]
pub struct ParseDeviceError(pub String);

impl FromStr for Device {
    type Err = ParseDeviceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseDeviceError(s.to_owned());
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(Device::Cpu),
            "gpu" => Ok(Device::Gpu(0)),
            other => other
                .strip_prefix("gpu:")
                .and_then(|n| n.parse::<u32>().ok())
                .map(Device::Gpu)
                .ok_or_else(err),
        }
    }
}

impl Serialize for Device {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Device {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Device {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Device".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^(cpu|gpu|gpu:[0-9]+)$",
            "description": "cpu, gpu (the first GPU adapter) or gpu:N"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_every_form() {
        for (s, d) in [
            ("cpu", Device::Cpu),
            ("gpu", Device::Gpu(0)),
            ("gpu:0", Device::Gpu(0)),
            ("GPU:3", Device::Gpu(3)),
        ] {
            assert_eq!(s.parse::<Device>(), Ok(d), "{s}");
        }
        assert_eq!(Device::Gpu(3).to_string(), "gpu:3");
        assert_eq!(Device::Gpu(0).to_string(), "gpu");
        for bad in ["", "cuda", "gpu:", "gpu:-1", "gpu:x", "cpu:1"] {
            assert!(bad.parse::<Device>().is_err(), "{bad}");
        }
    }
}
