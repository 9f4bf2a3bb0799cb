// SHA-256 (FIPS 180-4, computed by OpenSSL) of a byte string, as lowercase hex: the checksums the emitter writes into a
// manifest so the runtime can tell a rank program from the one the plan printed (python's
// hashlib.sha256(data).hexdigest() gives the same text).
#pragma once

#include <string>
#include <string_view>

namespace loom {

std::string sha256_hex(std::string_view data);

}  // namespace loom
