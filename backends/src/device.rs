//! Where the reference models compute: the flex CPU backend or a wgpu adapter (Vulkan or GL).
//!
//! `gpu:N` numbers the machine's adapters in one list, which is what `meshparity list devices`
//! prints: GPUs on Vulkan first (burn compiles its kernels to SPIR-V there), then GPUs only GL
//! reaches, then software renderers (Mesa's llvmpipe through GL before its Vulkan lavapipe,
//! which crashes on burn's SPIR-V kernels). burn addresses an adapter by graphics API, type and
//! index among adapters of that type, so the list is also what turns `gpu:N` into a burn
//! device. Enumeration happens on one thread, before any burn device exists: the Vulkan loader
//! does not like instances created concurrently.

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
    /// What a user should know before picking it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// The burn device it is (GPU builds only).
    #[serde(skip)]
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    target: Option<Target>,
}

/// burn's name for an adapter: a cubecl wgpu device pinned to its graphics API.
#[derive(Clone, Debug)]
struct Target(#[cfg(feature = "gpu")] burn_dispatch::devices::WgpuDevice);

impl Adapter {
    fn cpu() -> Self {
        Self {
            device: Device::Cpu,
            name: "flex (CPU)".to_owned(),
            api: "flex".to_owned(),
            kind: None,
            driver: String::new(),
            note: String::new(),
            target: None,
        }
    }

    /// `llvmpipe (LLVM 15.0.6, 256 bits) [gl, software]`: what reports show for a job.
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
                " (for Mesa's software adapter install its EGL and llvmpipe: `apt-get install libegl-mesa0 libgl1-mesa-dri`)"
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
    use burn::tensor::Device as BurnDevice;
    use burn_dispatch::devices::{WgpuBackend, WgpuDevice, WgpuDeviceKind};

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

    /// One adapter on one graphics API, with burn's index for it (burn counts adapters of one
    /// type, in enumeration order, on each API).
    struct Listed {
        info: wgpu::AdapterInfo,
        api: wgpu::Backend,
        index: usize,
    }

    impl Listed {
        fn software(&self) -> bool {
            self.info.device_type == wgpu::DeviceType::Cpu
        }

        /// Where it goes in `gpu:N` order: hardware on Vulkan (SPIR-V kernels, the fast path),
        /// hardware reachable only through GL, then software renderers with GL first. Mesa's
        /// lavapipe crashes compiling burn's SPIR-V matmul kernels (seen with Mesa 22.3 and 25.0)
        /// while llvmpipe runs the WGSL-to-GLSL ones, so a machine without a GPU gets GL.
        fn rank(&self) -> (u8, AdapterKind, usize) {
            let group = match (self.software(), self.api) {
                (false, wgpu::Backend::Vulkan) => 0,
                (false, _) => 1,
                (true, wgpu::Backend::Gl) => 2,
                (true, _) => 3,
            };
            (group, kind_of(self.info.device_type), self.index)
        }
    }

    fn on(api: wgpu::Backend) -> Vec<Listed> {
        let backends = wgpu::Backends::from(api);
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let infos: Vec<wgpu::AdapterInfo> =
            futures_lite::future::block_on(instance.enumerate_adapters(backends))
                .iter()
                .map(wgpu::Adapter::get_info)
                .collect();
        let mut seen: Vec<wgpu::DeviceType> = Vec::new();
        infos
            .into_iter()
            .map(|info| {
                let index = seen.iter().filter(|t| **t == info.device_type).count();
                seen.push(info.device_type);
                Listed { info, api, index }
            })
            .collect()
    }

    /// The machine's adapters in `gpu:N` order. A GPU that Vulkan reaches is not listed again
    /// through GL.
    fn listed() -> Vec<Listed> {
        let vulkan = on(wgpu::Backend::Vulkan);
        let gl: Vec<Listed> = on(wgpu::Backend::Gl)
            .into_iter()
            .filter(|g| {
                g.software()
                    || !vulkan
                        .iter()
                        .any(|v| !v.software() && v.info.name == g.info.name)
            })
            .collect();
        let mut all: Vec<Listed> = vulkan.into_iter().chain(gl).collect();
        all.sort_by_key(Listed::rank);
        all
    }

    pub fn adapters() -> Vec<Adapter> {
        listed()
            .into_iter()
            .enumerate()
            .map(|(n, l)| {
                let kind = match l.info.device_type {
                    wgpu::DeviceType::DiscreteGpu => WgpuDeviceKind::DiscreteGpu(l.index),
                    wgpu::DeviceType::IntegratedGpu => WgpuDeviceKind::IntegratedGpu(l.index),
                    wgpu::DeviceType::VirtualGpu => WgpuDeviceKind::VirtualGpu(l.index),
                    wgpu::DeviceType::Cpu => WgpuDeviceKind::Cpu,
                    wgpu::DeviceType::Other => WgpuDeviceKind::Other(l.index),
                };
                let backend = match l.api {
                    wgpu::Backend::Gl => WgpuBackend::Gl,
                    _ => WgpuBackend::Vulkan,
                };
                let note = if l.software() && l.api == wgpu::Backend::Vulkan {
                    "lavapipe crashes compiling burn's SPIR-V kernels; use the GL one".to_owned()
                } else {
                    String::new()
                };
                Adapter {
                    device: Device::Gpu(n as u32),
                    name: l.info.name.clone(),
                    api: match l.api {
                        wgpu::Backend::Gl => "gl",
                        _ => "vulkan",
                    }
                    .to_owned(),
                    kind: Some(kind_of(l.info.device_type)),
                    driver: [l.info.driver.as_str(), l.info.driver_info.as_str()]
                        .iter()
                        .filter(|s| !s.is_empty())
                        .copied()
                        .collect::<Vec<_>>()
                        .join(" "),
                    note,
                    target: Some(super::Target(WgpuDevice::new(kind).on(backend))),
                }
            })
            .collect()
    }

    pub fn burn_device(adapter: &Adapter) -> BurnDevice {
        let target = adapter
            .target
            .as_ref()
            .expect("GPU adapters carry their burn device");
        BurnDevice::new(target.0.clone())
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
