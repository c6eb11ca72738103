// SPDX-License-Identifier: Apache-2.0
//! gqla_tensor descriptors over host slices (contiguous, row-major).

use std::mem::size_of;

use gqla_sys as ffi;

use crate::enums::Element;

/// Describe `len`-checked host memory as a contiguous tensor of `shape`.
/// The caller has checked that the product of `shape` equals the slice length.
pub(crate) fn host_tensor<T: Element>(data: *const T, shape: &[usize]) -> ffi::gqla_tensor {
    debug_assert!(!shape.is_empty() && shape.len() <= ffi::GQLA_MAX_DIMS as usize);
    let mut tensor = ffi::gqla_tensor {
        struct_size: size_of::<ffi::gqla_tensor>(),
        // The library never writes through input tensors; the C struct has a
        // single mutable pointer type for inputs and outputs alike.
        data: data as *mut std::ffi::c_void,
        dtype: T::DTYPE.to_raw(),
        device: ffi::gqla_device_type::GQLA_DEVICE_CPU,
        device_index: 0,
        ndim: shape.len() as i32,
        shape: [0; ffi::GQLA_MAX_DIMS as usize],
        strides: [0; ffi::GQLA_MAX_DIMS as usize],
    };
    let mut stride = 1i64;
    for (axis, &extent) in shape.iter().enumerate().rev() {
        // Extents come from slice lengths, which never exceed isize::MAX.
        tensor.shape[axis] = extent as i64;
        tensor.strides[axis] = stride;
        stride *= (extent as i64).max(1);
    }
    tensor
}
