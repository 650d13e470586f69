//! Reading and validating a safetensors file.

use std::ops::Range;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use memmap2::Mmap;

use crate::dtype::TensorDtype;
use crate::error::InputError;

/// Header sizes past this are not checkpoints but corruption.
const MAX_HEADER: u64 = 100 << 20;

/// One tensor's place in its file.
#[derive(Clone, Debug)]
pub struct TensorEntry {
    pub dtype: TensorDtype,
    pub shape: Vec<usize>,
    /// Byte range within the file (header included).
    pub range: Range<usize>,
}

/// A validated safetensors file: memory-mapped, or held in memory before (or instead of)
/// being written.
pub struct SafetensorsFile {
    pub path: PathBuf,
    map: Bytes,
    pub tensors: IndexMap<String, TensorEntry>,
    pub metadata: IndexMap<String, String>,
}

/// A tensor's bytes with what they mean.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub dtype: TensorDtype,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

impl TensorView<'_> {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl SafetensorsFile {
    pub fn open(path: &Path) -> Result<Self, InputError> {
        let file = meshparity_files::open(path).map_err(|e| InputError::io(path, e))?;
        // SAFETY: the map is read-only; a file truncated by another process while mapped would
        // fault, which is the same contract every mmap-based checkpoint reader has.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| InputError::io(path, e))?;
        Self::parsed(path, Bytes::Mapped(map))
    }

    /// The file whose bytes are `bytes` (as [`crate::safetensors::encode`] makes them), to be
    /// known by `path`, where it is written if at all.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Self, InputError> {
        Self::parsed(path, Bytes::Owned(bytes))
    }

    fn parsed(path: &Path, map: Bytes) -> Result<Self, InputError> {
        let (tensors, metadata) =
            parse(&map).map_err(|reason| InputError::safetensors(path, reason))?;
        Ok(Self {
            path: path.to_owned(),
            map,
            tensors,
            metadata,
        })
    }

    /// The file's bytes, header included.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    pub fn view(&self, name: &str) -> Option<TensorView<'_>> {
        let e = self.tensors.get(name)?;
        Some(TensorView {
            dtype: e.dtype,
            shape: &e.shape,
            bytes: &self.map[e.range.clone()],
        })
    }

    /// Total bytes of tensor data.
    pub fn data_bytes(&self) -> usize {
        self.tensors.values().map(|e| e.range.len()).sum()
    }
}

/// Where a file's bytes live.
enum Bytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

type Parsed = (IndexMap<String, TensorEntry>, IndexMap<String, String>);

/// Validate the header against the file's bytes.
pub fn parse(bytes: &[u8]) -> Result<Parsed, String> {
    if bytes.len() < 8 {
        return Err(format!(
            "truncated: {} bytes, shorter than the 8-byte header length",
            bytes.len()
        ));
    }
    let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    if header_len > MAX_HEADER {
        return Err(format!(
            "header length {header_len} is implausibly large (corrupt file?)"
        ));
    }
    let header_end = 8 + header_len as usize;
    if header_end > bytes.len() {
        return Err(format!(
            "truncated: header length {header_len} but only {} bytes follow it",
            bytes.len() - 8
        ));
    }
    let header: Header = serde_json::from_slice(&bytes[8..header_end])
        .map_err(|e| format!("bad header JSON: {e}"))?;
    let header = header.0;
    let data_len = bytes.len() - header_end;
    let mut tensors = IndexMap::new();
    let mut metadata = IndexMap::new();
    let mut seen_metadata = false;
    for (name, v) in header {
        let v = match v {
            Raw::Metadata(_) if seen_metadata => {
                return Err("`__metadata__` is given twice".to_owned())
            }
            Raw::Metadata(v) => {
                seen_metadata = true;
                let obj = v.as_object().ok_or("`__metadata__` is not an object")?;
                for (k, v) in obj {
                    let s = v
                        .as_str()
                        .ok_or_else(|| format!("metadata `{k}` is not a string"))?;
                    metadata.insert(k.clone(), s.to_owned());
                }
                continue;
            }
            v => v,
        };
        let entry = entry(&name, &v, data_len)?;
        let entry = TensorEntry {
            range: header_end + entry.range.start..header_end + entry.range.end,
            ..entry
        };
        if tensors.insert(name.clone(), entry).is_some() {
            return Err(format!(
                "tensor `{name}` is named twice (a reader would keep one and hide the other)"
            ));
        }
    }
    let mut ranges: Vec<(&str, &Range<usize>)> = tensors
        .iter()
        .map(|(n, e)| (n.as_str(), &e.range))
        .collect();
    ranges.sort_by_key(|(_, r)| (r.start, r.end));
    for w in ranges.windows(2) {
        if w[1].1.start < w[0].1.end {
            return Err(format!(
                "data of tensors `{}` and `{}` overlap",
                w[0].0, w[1].0
            ));
        }
    }
    Ok((tensors, metadata))
}

/// The header's entries in file order, every one kept: a map would keep the last of a name
/// given twice and hide the first ([`parse`] refuses it, as the safetensors library does).
/// Entries are read into [`Raw`], not into JSON values: a value per entry (an ordered map of
/// three keys) made a header of 10^6 empty tensors cost 2 GB.
struct Header(Vec<(String, Raw)>);

/// One header entry as written: `__metadata__`'s object, or a tensor's three fields.
enum Raw {
    Metadata(serde_json::Value),
    Tensor {
        dtype: Option<serde_json::Value>,
        shape: Option<serde_json::Value>,
        offsets: Option<serde_json::Value>,
    },
    /// Not an object.
    Other,
}

impl<'de> serde::Deserialize<'de> for Header {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = Header;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of tensor entries")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Header, A::Error> {
                let mut out = Vec::new();
                while let Some(k) = map.next_key::<String>()? {
                    let raw = if k == "__metadata__" {
                        Raw::Metadata(map.next_value()?)
                    } else {
                        map.next_value::<Tensor>()?.0
                    };
                    out.push((k, raw));
                }
                Ok(Header(out))
            }
        }
        d.deserialize_map(Entries)
    }
}

/// A tensor entry's fields, or [`Raw::Other`] for a value that is no object.
struct Tensor(Raw);

impl<'de> serde::Deserialize<'de> for Tensor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::IgnoredAny;
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = Tensor;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a tensor entry")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Tensor, A::Error> {
                let (mut dtype, mut shape, mut offsets) = (None, None, None);
                while let Some(k) = map.next_key::<String>()? {
                    match k.as_str() {
                        "dtype" => dtype = Some(map.next_value()?),
                        "shape" => shape = Some(map.next_value()?),
                        "data_offsets" => offsets = Some(map.next_value()?),
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(Tensor(Raw::Tensor {
                    dtype,
                    shape,
                    offsets,
                }))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Tensor, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Tensor(Raw::Other))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Tensor, E> {
                Ok(Tensor(Raw::Other))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Tensor, E> {
                Ok(Tensor(Raw::Other))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Tensor, E> {
                Ok(Tensor(Raw::Other))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Tensor, E> {
                Ok(Tensor(Raw::Other))
            }
            fn visit_str<E>(self, _: &str) -> Result<Tensor, E> {
                Ok(Tensor(Raw::Other))
            }
            fn visit_unit<E>(self) -> Result<Tensor, E> {
                Ok(Tensor(Raw::Other))
            }
        }
        d.deserialize_any(Fields)
    }
}

fn entry(name: &str, v: &Raw, data_len: usize) -> Result<TensorEntry, String> {
    let Raw::Tensor {
        dtype,
        shape,
        offsets,
    } = v
    else {
        return Err(format!("tensor `{name}`: header entry is not an object"));
    };
    let dtype_s = dtype
        .as_ref()
        .and_then(|d| d.as_str())
        .ok_or_else(|| format!("tensor `{name}`: missing `dtype`"))?;
    let dtype = TensorDtype::parse(dtype_s)
        .ok_or_else(|| format!("tensor `{name}`: unsupported dtype `{dtype_s}`"))?;
    let shape = shape
        .as_ref()
        .and_then(|s| s.as_array())
        .ok_or_else(|| format!("tensor `{name}`: missing `shape`"))?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| format!("tensor `{name}`: shape must be a list of non-negative integers"))?;
    let offsets = offsets
        .as_ref()
        .and_then(|o| o.as_array())
        .filter(|o| o.len() == 2)
        .and_then(|o| Some((o[0].as_u64()?, o[1].as_u64()?)))
        .ok_or_else(|| format!("tensor `{name}`: `data_offsets` must be [begin, end]"))?;
    let (begin, end) = offsets;
    if end < begin {
        return Err(format!(
            "tensor `{name}`: data_offsets [{begin}, {end}] end before they begin"
        ));
    }
    if end > data_len as u64 {
        return Err(format!(
            "tensor `{name}`: data_offsets [{begin}, {end}] run past the data section ({data_len} bytes); the file is truncated or the header is wrong"
        ));
    }
    let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let expected = numel.and_then(|n| n.checked_mul(dtype.size()));
    if expected != Some((end - begin) as usize) {
        return Err(format!(
            "tensor `{name}`: shape {shape:?} of {dtype} needs {} bytes but data_offsets [{begin}, {end}] hold {}",
            expected.map_or_else(|| "more than 2^64".to_owned(), |e| e.to_string()),
            end - begin
        ));
    }
    Ok(TensorEntry {
        dtype,
        shape,
        range: begin as usize..end as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header.as_bytes());
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn malformed_headers_say_what_is_wrong() {
        let cases: &[(Vec<u8>, &str)] = &[
            (vec![1, 2, 3], "truncated: 3 bytes"),
            (file("{", &[]), "bad header JSON"),
            (
                (500u64).to_le_bytes().to_vec(),
                "header length 500 but only 0 bytes",
            ),
            (
                file(
                    r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
                    &[0; 4],
                ),
                "run past the data section (4 bytes)",
            ),
            (
                file(
                    r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
                    &[0; 8],
                ),
                "needs 12 bytes",
            ),
            (
                file(
                    r#"{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}}"#,
                    &[0; 8],
                ),
                "unsupported dtype `Q4`",
            ),
            (
                file(
                    r#"{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}"#,
                    &[0; 8],
                ),
                "non-negative",
            ),
            (
                file(
                    r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#,
                    &[0; 8],
                ),
                "end before they begin",
            ),
            (
                file(
                    r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
                    &[0; 8],
                ),
                "overlap",
            ),
            (file(r#"[1,2]"#, &[]), "bad header JSON"),
            (
                file(
                    r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
                    &[0; 8],
                ),
                "tensor `a` is named twice",
            ),
        ];
        for (bytes, want) in cases {
            let err = parse(bytes).unwrap_err();
            assert!(err.contains(want), "want `{want}`, got `{err}`");
        }
    }
}
