// SPDX-License-Identifier: Apache-2.0
//! 16-bit floats as stored in buffers passed to gqla: IEEE binary16 ([`F16`])
//! and bfloat16 ([`Bf16`]). Only conversions; arithmetic happens in f32.
//! Written here because the crate has no dependencies.

/// IEEE 754 binary16, stored as its bit pattern.
///
/// ```
/// use gqla::F16;
/// assert_eq!(F16::from_f32(1.5).to_f32(), 1.5);
/// assert_eq!(F16::from_f32(65520.0).to_f32(), f32::INFINITY); // rounds past the largest finite
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct F16(pub u16);

/// bfloat16 (the upper half of an f32), stored as its bit pattern.
///
/// ```
/// use gqla::Bf16;
/// assert_eq!(Bf16::from_f32(-2.0).to_f32(), -2.0);
/// assert_eq!(Bf16::from_f32(1.0 + 1.0 / 256.0).to_f32(), 1.0); // ties go to even
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Bf16(pub u16);

impl F16 {
    /// Nearest binary16 value (round half to even); overflow gives infinity.
    pub fn from_f32(value: f32) -> F16 {
        F16(f32_to_f16_bits(value))
    }

    /// The exact f32 value.
    pub fn to_f32(self) -> f32 {
        f16_bits_to_f32(self.0)
    }
}

impl Bf16 {
    /// Nearest bfloat16 value (round half to even); NaN stays NaN.
    pub fn from_f32(value: f32) -> Bf16 {
        let bits = value.to_bits();
        if value.is_nan() {
            // Keep the sign and force a quiet NaN: truncating could drop every payload bit.
            return Bf16(((bits >> 16) as u16) | 0x0040);
        }
        let rounding = 0x7fff + ((bits >> 16) & 1);
        Bf16((bits.wrapping_add(rounding) >> 16) as u16)
    }

    /// The exact f32 value.
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

impl From<F16> for f32 {
    fn from(value: F16) -> f32 {
        value.to_f32()
    }
}

impl From<Bf16> for f32 {
    fn from(value: Bf16) -> f32 {
        value.to_f32()
    }
}

fn f32_to_f16_bits(value: f32) -> u16 {
    let bits = value.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exponent = ((bits >> 23) & 0xff) as i32;
    let mantissa = bits & 0x007f_ffff;

    if exponent == 0xff {
        let nan_payload = if mantissa != 0 {
            0x0200 | (mantissa >> 13) as u16
        } else {
            0
        };
        return sign | 0x7c00 | nan_payload;
    }
    let half_exponent = exponent - 127 + 15;
    if half_exponent >= 0x1f {
        return sign | 0x7c00;
    }
    if half_exponent <= 0 {
        // Subnormal result (or zero): the value is m * 2^-24 with m below 2^10.
        if half_exponent < -10 {
            return sign;
        }
        let full = mantissa | 0x0080_0000;
        let shift = (14 - half_exponent) as u32;
        let half_ulp = 1u32 << (shift - 1);
        let rounded = (full + half_ulp - 1 + ((full >> shift) & 1)) >> shift;
        // A carry into bit 10 correctly yields the smallest normal.
        return sign | rounded as u16;
    }
    let rounded = mantissa + 0x0fff + ((mantissa >> 13) & 1);
    // A mantissa carry lands in the exponent field, which is the right result.
    let magnitude = ((half_exponent as u32) << 10) + (rounded >> 13);
    if magnitude >= 0x7c00 {
        sign | 0x7c00
    } else {
        sign | magnitude as u16
    }
}

fn f16_bits_to_f32(bits: u16) -> f32 {
    let sign = ((bits & 0x8000) as u32) << 16;
    let exponent = ((bits >> 10) & 0x1f) as u32;
    let mantissa = (bits & 0x03ff) as u32;
    match exponent {
        0 => {
            let magnitude = mantissa as f32 * (1.0 / 16_777_216.0); // m * 2^-24, exact
            if sign != 0 {
                -magnitude
            } else {
                magnitude
            }
        }
        0x1f => f32::from_bits(sign | 0x7f80_0000 | (mantissa << 13)),
        _ => f32::from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_round_trips_every_finite_value() {
        for bits in 0..=u16::MAX {
            let exponent = (bits >> 10) & 0x1f;
            if exponent == 0x1f {
                continue;
            }
            assert_eq!(
                F16::from_f32(F16(bits).to_f32()).0,
                bits,
                "bits {bits:#06x}"
            );
        }
    }

    #[test]
    fn f16_known_values() {
        assert_eq!(F16::from_f32(1.0).0, 0x3c00);
        assert_eq!(F16::from_f32(-2.0).0, 0xc000);
        assert_eq!(F16::from_f32(65504.0).0, 0x7bff);
        assert_eq!(F16::from_f32(1e6).0, 0x7c00);
        assert_eq!(F16::from_f32(5.960_464_5e-8).0, 0x0001); // 2^-24
        assert_eq!(F16::from_f32(2.0e-8).0, 0x0000); // below half the smallest subnormal
        assert!(F16::from_f32(f32::NAN).to_f32().is_nan());
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
        assert_eq!(F16::from_f32(1.0 + 1.0 / 2048.0).0, 0x3c00);
        assert_eq!(F16::from_f32(1.0 + 3.0 / 2048.0).0, 0x3c02);
    }

    #[test]
    fn f16_rounding_is_nearest() {
        let mut state = 0x1234_5678_u32;
        for _ in 0..100_000 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let x = (state as f32 / u32::MAX as f32 - 0.5) * 200.0;
            let h = F16::from_f32(x);
            let err = (h.to_f32() - x).abs();
            let next_up = F16(h.0 + 1).to_f32();
            let next_down = F16(h.0.wrapping_sub(1)).to_f32();
            assert!(
                err <= (next_up - x).abs() && err <= (next_down - x).abs(),
                "x {x}"
            );
        }
    }

    #[test]
    fn bf16_known_values() {
        assert_eq!(Bf16::from_f32(1.0).0, 0x3f80);
        assert_eq!(Bf16::from_f32(-0.0).0, 0x8000);
        assert_eq!(
            Bf16::from_f32(1.0 + 3.0 / 256.0).to_f32(),
            1.0 + 4.0 / 256.0
        );
        assert!(Bf16::from_f32(f32::NAN).to_f32().is_nan());
        assert_eq!(Bf16::from_f32(f32::INFINITY).to_f32(), f32::INFINITY);
    }
}
