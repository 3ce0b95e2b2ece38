#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/enum_names.h"

namespace qat {

enum class DType : uint8_t { f32, i8, u8, i32 };
enum class Device : uint8_t { cpu, cuda };
constexpr auto enum_names(Device) {
  return std::to_array<EnumName<Device>>({{Device::cpu, "cpu"}, {Device::cuda, "cuda"}});
}

size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* device_name(Device d);

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }

}  // namespace qat
