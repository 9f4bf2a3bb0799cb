// The operator registry: the table of OpDefs, one family per source file. Registration is explicit
// (a function per family, called by builtin_ops()), never by static initializers.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "loom/ir/op_def.h"

namespace loom::ops {

class OpRegistry final : public ir::OpCatalog {
 public:
  // Rejects a duplicate type or a definition without a signature.
  Expected<void> add(ir::OpDef def);
  // For the built-in families: a bad built-in definition is a programming error and aborts.
  void add_builtin(ir::OpDef def);

  const ir::OpDef* find(std::string_view type) const override;
  std::vector<const ir::OpDef*> all() const;  // sorted by family, then type
  std::size_t size() const { return defs_.size(); }

 private:
  std::map<std::string, ir::OpDef, std::less<>> defs_;
};

// Every built-in family, registered once.
const OpRegistry& builtin_ops();

}  // namespace loom::ops
