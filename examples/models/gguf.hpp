// A GGUF reader (versions 2 and 3) for the example models: header, metadata
// key/value pairs of every type, tensor infos and the aligned data section.
// Every read is bounds-checked, so a bad or truncated file gives a clear
// error (gguf_error) instead of a crash. Tensors of type F32, F16 and I32
// can be read as floats / ints; other ggml types are listed but refused on
// read. Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace gguf {

//! Every parse or lookup failure.
struct gguf_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

//! Metadata value types (the file's uint32 codes).
enum class value_type : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12
};

//! The ggml tensor types this reader can convert.
enum class tensor_type : std::uint32_t { f32 = 0, f16 = 1, i32 = 26 };

//! One metadata value: a scalar (widened), a string, or an array of them.
struct value {
  value_type type = value_type::u8;
  value_type elem = value_type::u8;  //!< element type of an array
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string> scalar;
  std::vector<value> items;  //!< array elements
};

//! Where one tensor lives in the file. dims[0] is the fastest-moving
//! (ggml's ne[0]), so a PyTorch [out, in] weight has dims {in, out}.
struct tensor_info {
  std::string name;
  std::vector<std::uint64_t> dims;
  std::uint32_t type = 0;
  std::uint64_t offset = 0;  //!< from the start of the data section
  std::uint64_t elements() const {
    std::uint64_t n = 1;
    for (auto d : dims) n *= d;
    return n;
  }
};

//! A parsed GGUF file (the whole file is held in memory; ours are small).
class file {
 public:
  //! Parses `path`; throws gguf_error naming the file and the problem.
  static file open(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw gguf_error("gguf: cannot open " + path);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return parse(std::vector<std::uint8_t>(bytes.begin(), bytes.end()), path);
  }

  //! Parses an in-memory image (`name` only labels errors).
  static file parse(std::vector<std::uint8_t> bytes, const std::string& name = "<memory>") {
    file f;
    f.name_ = name;
    f.bytes_ = std::move(bytes);
    f.parse_all();
    return f;
  }

  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  const std::map<std::string, value>& metadata() const { return kv_; }
  const std::vector<tensor_info>& tensors() const { return tensors_; }

  bool has(const std::string& key) const { return kv_.count(key) != 0; }
  const value& get(const std::string& key) const {
    auto it = kv_.find(key);
    if (it == kv_.end()) throw gguf_error("gguf: " + name_ + ": missing metadata key " + key);
    return it->second;
  }
  //! An integer metadata value (any integer type).
  std::int64_t get_int(const std::string& key) const {
    const value& v = get(key);
    if (const auto* u = std::get_if<std::uint64_t>(&v.scalar)) return static_cast<std::int64_t>(*u);
    if (const auto* s = std::get_if<std::int64_t>(&v.scalar)) return *s;
    throw gguf_error("gguf: " + name_ + ": key " + key + " is not an integer");
  }
  double get_float(const std::string& key) const {
    const value& v = get(key);
    if (const auto* d = std::get_if<double>(&v.scalar)) return *d;
    return static_cast<double>(get_int(key));
  }
  std::string get_string(const std::string& key) const {
    const value& v = get(key);
    if (const auto* s = std::get_if<std::string>(&v.scalar)) return *s;
    throw gguf_error("gguf: " + name_ + ": key " + key + " is not a string");
  }

  const tensor_info& info(const std::string& tensor) const {
    for (const auto& t : tensors_)
      if (t.name == tensor) return t;
    throw gguf_error("gguf: " + name_ + ": missing tensor " + tensor);
  }
  //! A tensor as floats (F32 or F16), checked against the expected dims.
  std::vector<float> floats(const std::string& tensor, const std::vector<std::uint64_t>& dims) const {
    const tensor_info& t = info(tensor);
    check_dims(t, dims);
    std::vector<float> out(t.elements());
    const std::uint8_t* src = data(t);
    if (t.type == static_cast<std::uint32_t>(tensor_type::f32)) {
      std::memcpy(out.data(), src, out.size() * sizeof(float));
    } else if (t.type == static_cast<std::uint32_t>(tensor_type::f16)) {
      for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = half_to_float(h);
      }
    } else {
      throw gguf_error("gguf: " + name_ + ": tensor " + tensor + " has type " + std::to_string(t.type) +
                       ", expected F32 or F16");
    }
    return out;
  }
  std::vector<std::int32_t> ints(const std::string& tensor) const {
    const tensor_info& t = info(tensor);
    if (t.type != static_cast<std::uint32_t>(tensor_type::i32))
      throw gguf_error("gguf: " + name_ + ": tensor " + tensor + " is not I32");
    std::vector<std::int32_t> out(t.elements());
    std::memcpy(out.data(), data(t), out.size() * sizeof(std::int32_t));
    return out;
  }

  //! IEEE half to float (normals, subnormals, inf and NaN).
  static float half_to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    std::uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
      bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
      bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 113;
      while ((man & 0x400u) == 0) {
        man <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }

 private:
  std::string name_;
  std::vector<std::uint8_t> bytes_;
  std::size_t pos_ = 0;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_start_ = 0;
  std::map<std::string, value> kv_;
  std::vector<tensor_info> tensors_;

  [[noreturn]] void fail(const std::string& what) const {
    throw gguf_error("gguf: " + name_ + ": " + what + " (at byte " + std::to_string(pos_) + " of " +
                     std::to_string(bytes_.size()) + ")");
  }
  void need(std::uint64_t n, const char* what) {
    if (n > bytes_.size() - pos_) fail(std::string("truncated file while reading ") + what);
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    const auto n = read<std::uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }

  value read_value(value_type t, int depth) {
    value v;
    v.type = t;
    switch (t) {
      case value_type::u8:
        v.scalar = std::uint64_t{read<std::uint8_t>("u8")};
        break;
      case value_type::i8:
        v.scalar = std::int64_t{read<std::int8_t>("i8")};
        break;
      case value_type::u16:
        v.scalar = std::uint64_t{read<std::uint16_t>("u16")};
        break;
      case value_type::i16:
        v.scalar = std::int64_t{read<std::int16_t>("i16")};
        break;
      case value_type::u32:
        v.scalar = std::uint64_t{read<std::uint32_t>("u32")};
        break;
      case value_type::i32:
        v.scalar = std::int64_t{read<std::int32_t>("i32")};
        break;
      case value_type::u64:
        v.scalar = read<std::uint64_t>("u64");
        break;
      case value_type::i64:
        v.scalar = read<std::int64_t>("i64");
        break;
      case value_type::f32:
        v.scalar = double{read<float>("f32")};
        break;
      case value_type::f64:
        v.scalar = read<double>("f64");
        break;
      case value_type::boolean: {
        const auto b = read<std::uint8_t>("bool");
        if (b > 1) fail("bool value is neither 0 nor 1");
        v.scalar = b == 1;
        break;
      }
      case value_type::string:
        v.scalar = read_string("string value");
        break;
      case value_type::array: {
        if (depth > 0) fail("nested arrays are not supported");
        const auto et = read<std::uint32_t>("array type");
        if (et > static_cast<std::uint32_t>(value_type::f64)) fail("unknown array element type " + std::to_string(et));
        v.elem = static_cast<value_type>(et);
        const auto n = read<std::uint64_t>("array length");
        // Every element takes at least one byte: reject impossible counts before allocating.
        need(n, "array elements");
        v.items.reserve(static_cast<std::size_t>(n));
        for (std::uint64_t i = 0; i < n; ++i) v.items.push_back(read_value(v.elem, depth + 1));
        break;
      }
      default:
        fail("unknown metadata value type " + std::to_string(static_cast<std::uint32_t>(t)));
    }
    return v;
  }

  void parse_all() {
    const auto magic = read<std::uint32_t>("magic");
    if (magic != 0x46554747u) fail("bad magic (not a GGUF file)");
    version_ = read<std::uint32_t>("version");
    if (version_ != 2 && version_ != 3) fail("unsupported GGUF version " + std::to_string(version_));
    const auto n_tensors = read<std::uint64_t>("tensor count");
    const auto n_kv = read<std::uint64_t>("metadata count");
    // A tensor info or key/value pair takes well over 8 bytes.
    if (n_tensors > bytes_.size() / 8 || n_kv > bytes_.size() / 8)
      fail("truncated or corrupt file: tensor or metadata count exceeds file size");
    for (std::uint64_t i = 0; i < n_kv; ++i) {
      std::string key = read_string("metadata key");
      const auto t = read<std::uint32_t>("metadata type");
      if (t > static_cast<std::uint32_t>(value_type::f64)) fail("key " + key + ": unknown type " + std::to_string(t));
      value v = read_value(static_cast<value_type>(t), 0);
      if (!kv_.emplace(key, std::move(v)).second) fail("duplicate metadata key " + key);
    }
    if (has("general.alignment")) {
      const std::int64_t a = get_int("general.alignment");
      if (a <= 0 || (a & (a - 1)) != 0) fail("general.alignment is not a power of two");
      alignment_ = static_cast<std::uint64_t>(a);
    }
    for (std::uint64_t i = 0; i < n_tensors; ++i) {
      tensor_info t;
      t.name = read_string("tensor name");
      const auto nd = read<std::uint32_t>("tensor rank");
      if (nd == 0 || nd > 4) fail("tensor " + t.name + ": rank " + std::to_string(nd) + " outside 1..4");
      for (std::uint32_t d = 0; d < nd; ++d) {
        t.dims.push_back(read<std::uint64_t>("tensor dims"));
        if (t.dims.back() == 0) fail("tensor " + t.name + ": zero dimension");
      }
      std::uint64_t count = 1;  // bounded by the file size, so elements() cannot overflow
      for (auto d : t.dims)
        if ((count *= d) > bytes_.size()) fail("tensor " + t.name + ": more elements than the file has bytes");
      t.type = read<std::uint32_t>("tensor type");
      t.offset = read<std::uint64_t>("tensor offset");
      if (t.offset % alignment_ != 0) fail("tensor " + t.name + ": offset not aligned");
      tensors_.push_back(std::move(t));
    }
    data_start_ = (pos_ + alignment_ - 1) / alignment_ * alignment_;
    for (const auto& t : tensors_) {
      const std::uint64_t size = t.elements() * element_size(t);
      if (data_start_ > bytes_.size() || t.offset > bytes_.size() - data_start_ ||
          size > bytes_.size() - data_start_ - t.offset)
        throw gguf_error("gguf: " + name_ + ": truncated file: tensor " + t.name + " (" + std::to_string(size) +
                         " bytes at data offset " + std::to_string(t.offset) + ") runs past the end of the file (" +
                         std::to_string(bytes_.size()) + " bytes)");
    }
  }

  std::uint64_t element_size(const tensor_info& t) const {
    switch (t.type) {
      case static_cast<std::uint32_t>(tensor_type::f32):
        return 4;
      case static_cast<std::uint32_t>(tensor_type::f16):
        return 2;
      case static_cast<std::uint32_t>(tensor_type::i32):
        return 4;
      default:
        throw gguf_error("gguf: " + name_ + ": tensor " + t.name + ": unsupported ggml type " + std::to_string(t.type));
    }
  }
  const std::uint8_t* data(const tensor_info& t) const { return bytes_.data() + data_start_ + t.offset; }
  void check_dims(const tensor_info& t, const std::vector<std::uint64_t>& dims) const {
    if (t.dims != dims) {
      std::string got, want;
      for (auto d : t.dims) got += std::to_string(d) + " ";
      for (auto d : dims) want += std::to_string(d) + " ";
      throw gguf_error("gguf: " + name_ + ": tensor " + t.name + " has dims [ " + got + "], expected [ " + want + "]");
    }
  }
};

}  // namespace gguf
