// Named mesh axes; see mesh_layout.h.
#include "comm/mesh_layout.h"

#include <algorithm>

#include "core/strings.h"

namespace zero {

namespace {

std::string known_axes() {
  std::string s;
  for (std::string_view a : kMeshAxisNames) s += cat(s.empty() ? "" : ", ", a);
  return s;
}

std::vector<std::string> split_order(std::string_view order) {
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    const size_t dash = order.find('-', start);
    names.emplace_back(order.substr(start, dash == std::string_view::npos ? std::string_view::npos : dash - start));
    if (dash == std::string_view::npos) break;
    start = dash + 1;
  }
  return names;
}

std::string sizes_text(const std::vector<MeshAxis>& axes) {
  std::string s;
  for (const MeshAxis& a : axes) s += cat(s.empty() ? "" : " x ", a.name, " ", a.size);
  return s;
}

}  // namespace

absl::Status MeshLayout::check_order(std::string_view order) {
  std::vector<std::string> seen;
  for (const std::string& name : split_order(order)) {
    if (std::find(std::begin(kMeshAxisNames), std::end(kMeshAxisNames), name) == std::end(kMeshAxisNames)) {
      return absl::InvalidArgumentError(cat("mesh order \"", order, "\": \"", name, "\" is not an axis (the axes: ",
                                            known_axes(), ", joined by '-', fastest-varying first)"));
    }
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      return absl::InvalidArgumentError(cat("mesh order \"", order, "\": axis ", name, " is named twice"));
    }
    seen.push_back(name);
  }
  return absl::OkStatus();
}

absl::StatusOr<MeshLayout> MeshLayout::create(std::string_view order, const std::map<std::string, int>& sizes,
                                              int world) {
  if (absl::Status s = check_order(order); !s.ok()) return s;
  MeshLayout l;
  l.world_ = world;
  for (const std::string& name : split_order(order)) l.axes_.push_back({name, 1});
  for (const auto& [name, size] : sizes) {
    const int i = l.index(name);
    if (i < 0) {
      return absl::InvalidArgumentError(
          cat("mesh order \"", order, "\" has no axis ", name, " (of size ", size, "); add it to the order"));
    }
    if (size < 1) return absl::InvalidArgumentError(cat("mesh axis ", name, " of size ", size, ": at least 1"));
    l.axes_[static_cast<size_t>(i)].size = size;
  }
  int given = 1;
  for (const MeshAxis& a : l.axes_) given *= (a.name == "dp" && sizes.count("dp") == 0) ? 1 : a.size;
  const int dp = l.index("dp");
  if (dp >= 0 && sizes.count("dp") == 0 && world % given == 0) l.axes_[static_cast<size_t>(dp)].size = world / given;
  int product = 1;
  for (const MeshAxis& a : l.axes_) product *= a.size;
  if (product != world) {
    return absl::InvalidArgumentError(cat("mesh ", sizes_text(l.axes_), " (order \"", order, "\") is ", product,
                                          " ranks, not the world's ", world,
                                          dp >= 0 && sizes.count("dp") == 0
                                              ? cat(": the other axes (", given, " ranks) must divide the world")
                                              : std::string()));
  }
  return l;
}

int MeshLayout::index(std::string_view axis) const {
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (axes_[i].name == axis) return static_cast<int>(i);
  }
  return -1;
}

int MeshLayout::stride(int index) const {
  int s = 1;
  for (int i = 0; i < index; ++i) s *= axes_[static_cast<size_t>(i)].size;
  return s;
}

int MeshLayout::size(std::string_view axis) const {
  const int i = index(axis);
  return i < 0 ? 1 : axes_[static_cast<size_t>(i)].size;
}

int MeshLayout::coordinate(int rank, std::string_view axis) const {
  const int i = index(axis);
  return i < 0 ? 0 : (rank / stride(i)) % axes_[static_cast<size_t>(i)].size;
}

int MeshLayout::rank_at(const std::map<std::string, int>& coordinates) const {
  int r = 0;
  for (size_t i = 0; i < axes_.size(); ++i) {
    auto it = coordinates.find(axes_[i].name);
    if (it != coordinates.end()) r += it->second * stride(static_cast<int>(i));
  }
  return r;
}

int MeshLayout::group_color(int rank, std::string_view axis) const {
  // The rank with this axis's coordinate zeroed: the same for every member.
  return rank - coordinate(rank, axis) * (index(axis) < 0 ? 0 : stride(index(axis)));
}

std::string MeshLayout::describe() const { return sizes_text(axes_); }

}  // namespace zero
