#include "apps/npy.hpp"

#include <cstring>
#include <fstream>
#include <iterator>

#include "graph/error.hpp"

namespace tessera::apps {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

std::string header_value(const std::string& header, const std::string& key) {
  // The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3),
  // }
  size_t pos = header.find("'" + key + "'");
  if (pos == std::string::npos) return {};
  pos = header.find(':', pos + key.size() + 2);
  if (pos == std::string::npos) return {};
  pos = header.find_first_not_of(' ', pos + 1);
  if (pos == std::string::npos) return {};
  const char open = header[pos];
  if (open == '\'' || open == '(') {
    const size_t close = header.find(open == '(' ? ')' : '\'', pos + 1);
    return close == std::string::npos ? std::string() : header.substr(pos, close - pos + 1);
  }
  const size_t end = header.find_first_of(",}", pos);
  std::string word = header.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
  word.erase(word.find_last_not_of(' ') + 1);
  return word;
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto fail = [&](const std::string& why) -> Error { return Error("'" + path + "' " + why); };
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, kMagicSize) != 0)
    throw fail("is not a .npy file");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw fail("is truncated");
    for (int i = 0; i < 4; ++i)
      header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    header_start = 12;
  } else {
    throw fail("has unsupported .npy version " + std::to_string(major));
  }
  if (header_start + header_len > bytes.size()) throw fail("is truncated (header)");
  const std::string header(bytes.data() + header_start, header_len);
  const std::string descr = header_value(header, "descr");
  const bool is_int64 = descr == "'<i8'" || descr == "'=i8'";
  if (descr != "'<f4'" && descr != "'=f4'" && !is_int64)
    throw fail("has dtype " + (descr.empty() ? std::string("(unknown)") : descr) +
               "; Tessera takes float32 ('<f4') arrays, and int64 ('<i8') for index inputs");
  if (header_value(header, "fortran_order") != "False")
    throw fail("is in Fortran order; save it C-contiguous (numpy.ascontiguousarray)");
  std::string shape_text = header_value(header, "shape");
  if (shape_text.size() < 2) throw fail("has no shape in its header");
  NpyArray array;
  int64_t numel = 1;
  std::string inner = shape_text.substr(1, shape_text.size() - 2);
  size_t pos = 0;
  while (pos < inner.size()) {
    size_t comma = inner.find(',', pos);
    std::string item =
        inner.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) {
      if (item.find_first_not_of("0123456789") != std::string::npos || item.size() > 12)
        throw fail("has a malformed shape " + shape_text);
      int64_t d = std::stoll(item);
      array.shape.push_back(d);
      numel *= d;
      if (numel > (int64_t{1} << 40)) throw fail("declares an absurdly large shape " + shape_text);
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  const size_t data_start = header_start + header_len;
  const size_t want = static_cast<size_t>(numel) * (is_int64 ? sizeof(int64_t) : sizeof(float));
  if (bytes.size() - data_start < want)
    throw fail("is truncated: " + std::to_string(bytes.size() - data_start) + " data bytes, " +
               std::to_string(want) + " expected");
  if (is_int64) {
    array.dtype = "int64";
    array.int64_data.resize(static_cast<size_t>(numel));
    std::memcpy(array.int64_data.data(), bytes.data() + data_start, want);
  } else {
    array.data.resize(static_cast<size_t>(numel));
    std::memcpy(array.data.data(), bytes.data() + data_start, want);
  }
  return array;
}

void write_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  int64_t numel = 1;
  for (int64_t d : shape) {
    header += std::to_string(d) + ", ";
    numel *= d;
  }
  if (shape.size() > 1) header.erase(header.size() - 1);  // "(2, 3)" but "(4,)"
  if (shape.size() > 1)
    header.back() = ')';
  else
    header += ")";
  header += ", }";
  // Pad with spaces so data starts on a 64-byte boundary; the header ends in '\n'.
  const size_t unpadded = kMagicSize + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("cannot write '" + path + "': " + std::strerror(errno));
  out.write(kMagic, kMagicSize);
  const char version[2] = {1, 0};
  out.write(version, 2);
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data),
            static_cast<std::streamsize>(numel * sizeof(float)));
  if (!out) throw Error("cannot write '" + path + "': disk full or I/O error");
}

}  // namespace tessera::apps
