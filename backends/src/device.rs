//! Where the reference models compute: the flex CPU backend or a wgpu (Vulkan) adapter.
//!
//! `gpu:N` numbers the machine's Vulkan adapters in one list (real GPUs first, software
//! renderers such as Mesa's lavapipe last), which is what `meshparity list devices` prints. burn
//! addresses an adapter by its type and its index among adapters of that type, so the list is
//! also what turns `gpu:N` into a burn device. Enumeration happens on one thread, before any
//! burn device exists: the Vulkan loader does not like instances created concurrently.

use meshparity_specs::Device;
use serde::Serialize;

/// What kind of adapter wgpu reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdapterKind {
    Discrete,
    Integrated,
    Virtual,
    Other,
    /// A software renderer (lavapipe, llvmpipe, SwiftShader): correct, slow.
    Software,
}

/// One device the machine offers.
#[derive(Clone, Debug, Serialize)]
pub struct Adapter {
    /// `cpu`, `gpu`, `gpu:1`, …
    pub device: Device,
    pub name: String,
    /// `flex` for the CPU backend, the graphics API (`vulkan`) for adapters.
    pub api: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<AdapterKind>,
    /// Driver name and version, as the driver reports them.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub driver: String,
}

impl Adapter {
    pub fn is_software(&self) -> bool {
        self.kind == Some(AdapterKind::Software)
    }

    fn cpu() -> Self {
        Self {
            device: Device::Cpu,
            name: "flex (CPU)".to_owned(),
            api: "flex".to_owned(),
            kind: None,
            driver: String::new(),
        }
    }

    /// `llvmpipe (LLVM 15.0.6, 256 bits) [vulkan, software]`: what reports show for a job.
    pub fn label(&self) -> String {
        match self.kind {
            None => "cpu".to_owned(),
            Some(k) => format!(
                "{} [{}, {}]",
                self.name,
                self.api,
                serde_json::to_value(k)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error(
        "this meshparity was built without the GPU backend, so `{0}` is not available; \
         rebuild with `cargo build --release --features gpu` or run with `--device cpu`"
    )]
    NotBuilt(Device),
    #[error(
        "`{device}` does not exist: this machine has {found} GPU adapter(s){hint}; \
         `meshparity list devices` shows them"
    )]
    NoAdapter {
        device: Device,
        found: usize,
        hint: &'static str,
    },
}

/// Whether this binary has the GPU backend.
pub const GPU_BUILT: bool = cfg!(feature = "gpu");

/// Every device: the CPU first, then each GPU adapter as `gpu:N`.
pub fn devices() -> Vec<Adapter> {
    let mut out = vec![Adapter::cpu()];
    out.extend(gpu::adapters());
    out
}

/// The adapter `device` names, or why it cannot be used.
pub fn find(device: Device) -> Result<Adapter, DeviceError> {
    let Device::Gpu(n) = device else {
        return Ok(Adapter::cpu());
    };
    if !GPU_BUILT {
        return Err(DeviceError::NotBuilt(device));
    }
    let adapters = gpu::adapters();
    let found = adapters.len();
    adapters
        .into_iter()
        .nth(n as usize)
        .ok_or(DeviceError::NoAdapter {
            device,
            found,
            hint: if found == 0 {
                " (for a software adapter install Mesa's Vulkan drivers, e.g. `apt-get install mesa-vulkan-drivers`)"
            } else {
                ""
            },
        })
}

/// The burn device of an adapter [`find`] returned.
pub(crate) fn burn_device(adapter: &Adapter) -> burn::tensor::Device {
    match adapter.kind {
        None => burn::tensor::Device::flex(),
        Some(_) => gpu::burn_device(adapter),
    }
}

#[cfg(feature = "gpu")]
mod gpu {
    use burn::tensor::{Device as BurnDevice, DeviceKind};

    use super::{Adapter, AdapterKind, Device};

    fn kind_of(t: wgpu::DeviceType) -> AdapterKind {
        match t {
            wgpu::DeviceType::DiscreteGpu => AdapterKind::Discrete,
            wgpu::DeviceType::IntegratedGpu => AdapterKind::Integrated,
            wgpu::DeviceType::VirtualGpu => AdapterKind::Virtual,
            wgpu::DeviceType::Cpu => AdapterKind::Software,
            wgpu::DeviceType::Other => AdapterKind::Other,
        }
    }

    /// The machine's Vulkan adapters, best first, with burn's per-type index of each.
    fn listed() -> Vec<(wgpu::AdapterInfo, usize)> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::VULKAN,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let infos: Vec<wgpu::AdapterInfo> =
            futures_lite::future::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN))
                .iter()
                .map(wgpu::Adapter::get_info)
                .collect();
        // burn's index counts adapters of one type in enumeration order.
        let mut seen: Vec<wgpu::DeviceType> = Vec::new();
        let mut out: Vec<(wgpu::AdapterInfo, usize)> = infos
            .into_iter()
            .map(|info| {
                let index = seen.iter().filter(|t| **t == info.device_type).count();
                seen.push(info.device_type);
                (info, index)
            })
            .collect();
        out.sort_by_key(|(info, index)| (kind_of(info.device_type), *index));
        out
    }

    pub fn adapters() -> Vec<Adapter> {
        listed()
            .into_iter()
            .enumerate()
            .map(|(n, (info, _))| Adapter {
                device: Device::Gpu(n as u32),
                name: info.name.clone(),
                api: "vulkan".to_owned(),
                kind: Some(kind_of(info.device_type)),
                driver: [info.driver.as_str(), info.driver_info.as_str()]
                    .iter()
                    .filter(|s| !s.is_empty())
                    .copied()
                    .collect::<Vec<_>>()
                    .join(" "),
            })
            .collect()
    }

    pub fn burn_device(adapter: &Adapter) -> BurnDevice {
        let Device::Gpu(n) = adapter.device else {
            unreachable!("CPU adapters are flex devices")
        };
        let (info, index) = listed()
            .into_iter()
            .nth(n as usize)
            .expect("the adapter was found a moment ago");
        let kind = match info.device_type {
            wgpu::DeviceType::DiscreteGpu => DeviceKind::DiscreteGpu(index),
            wgpu::DeviceType::IntegratedGpu => DeviceKind::IntegratedGpu(index),
            wgpu::DeviceType::VirtualGpu => DeviceKind::VirtualGpu(index),
            wgpu::DeviceType::Cpu => DeviceKind::Cpu,
            // burn has no index for unclassified adapters; its default pick is the one there is.
            wgpu::DeviceType::Other => DeviceKind::DefaultDevice,
        };
        BurnDevice::vulkan(kind)
    }
}

#[cfg(not(feature = "gpu"))]
mod gpu {
    use super::Adapter;

    pub fn adapters() -> Vec<Adapter> {
        Vec::new()
    }

    pub fn burn_device(_: &Adapter) -> burn::tensor::Device {
        unreachable!("GPU adapters exist only in builds with the `gpu` feature")
    }
}
