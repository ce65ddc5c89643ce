// runtime/store/file_store_format.h - the bytes of a FileStore's file.
//
// The file is an append-only log of the store's changes, so every process can catch up by
// reading only what was appended since it last looked:
//
//   file   := header record*
//   header := "BRAIDFS1"                                   8 bytes
//   record := op:u8 key_len:u32 value_len:u32 key value    little-endian lengths
//   op     := 1 (set key to value) | 2 (delete key; value_len is 0)
//
// add and compare_set are resolved by the writer while it holds the file lock, so the log only
// ever records their outcome as a set: readers never re-run arithmetic.
//
// A process killed in the middle of an append leaves a record cut short at the end of the file.
// Writers append only while holding the lock, so whoever takes the lock next and finds such a
// tail knows nobody is still writing it, and cuts it off.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace braid::store {

inline constexpr std::string_view kFileStoreMagic = "BRAIDFS1";
inline constexpr size_t kRecordHeaderBytes = 1 + 4 + 4;
inline constexpr uint64_t kMaxFileStoreField = UINT32_MAX;

enum class FileOp : uint8_t { set = 1, del = 2 };

inline void put_u32le(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

inline uint32_t get_u32le(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

// Callers check the sizes against kMaxFileStoreField first.
inline std::string encode_record(FileOp op, std::string_view key, std::string_view value) {
  std::string out;
  out.reserve(kRecordHeaderBytes + key.size() + value.size());
  out.push_back(static_cast<char>(op));
  put_u32le(out, static_cast<uint32_t>(key.size()));
  put_u32le(out, static_cast<uint32_t>(value.size()));
  out.append(key);
  out.append(value);
  return out;
}

struct FileRecord {
  FileOp op;
  std::string_view key;
  std::string_view value;
};

enum class ParseResult { record, incomplete, corrupt };

// Reads the record at the start of `bytes`. On `record`, *consumed is its size.
inline ParseResult parse_record(std::string_view bytes, FileRecord* rec, size_t* consumed) {
  if (bytes.size() < kRecordHeaderBytes) return ParseResult::incomplete;
  auto op = static_cast<FileOp>(static_cast<uint8_t>(bytes[0]));
  if (op != FileOp::set && op != FileOp::del) return ParseResult::corrupt;
  uint64_t key_len = get_u32le(bytes.data() + 1);
  uint64_t value_len = get_u32le(bytes.data() + 5);
  if (op == FileOp::del && value_len != 0) return ParseResult::corrupt;
  uint64_t total = kRecordHeaderBytes + key_len + value_len;
  if (bytes.size() < total) return ParseResult::incomplete;
  rec->op = op;
  rec->key = bytes.substr(kRecordHeaderBytes, key_len);
  rec->value = bytes.substr(kRecordHeaderBytes + key_len, value_len);
  *consumed = total;
  return ParseResult::record;
}

}  // namespace braid::store
