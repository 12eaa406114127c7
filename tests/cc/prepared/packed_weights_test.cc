// cpukern::PackedWeights (kernels/common/packed_weights.h), the packed-weights type every op
// derives: on a synthetic op, owned sections round-trip through the serialised form and come
// back as views of it that keep their owner alive; and on each real op (ternary,
// widely_linear, moe), the base-class view of the weights (identity, shape, sections, scales)
// matches what the op wrote, an import's sections sit where the header puts them, and a blob
// whose section sizes disagree with its dims is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/aligned_buffer.h"
#include "kernels/common/bf16.h"
#include "kernels/common/errors.h"
#include "kernels/common/packed_weights.h"
#include "kernels/common/prepared_blob.h"
#include "kernels/common/ternary_codes.h"
#include "kernels/moe/moe.h"
#include "kernels/ternary/ternary.h"
#include "kernels/widely_linear/widely_linear.h"
#include "tests/cc/prepared/tamper.h"

namespace cpukern {
namespace {

// A synthetic op: dims {rows, cols}; sections 0 a layout of rows * cols bytes, 1 float32
// scales (rows), 2 an optional extra layout (cols bytes).
constexpr blob::OpFormat kUnit{"unit", 2, 3};

struct UnitWeights final : PackedWeights {
  UnitWeights() : PackedWeights(kUnit, 1, "weights") {
    weight_format = "u8";
    act = "fp32";
  }
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> shape() const override { return {rows, cols}; }

 protected:
  BlobContents blob_contents(const SerializeOptions&, bool) const override {
    BlobContents c = held_sections();
    c.dims[0] = rows;
    c.dims[1] = cols;
    c.format = "unit_format";
    return c;
  }
};

// into: packed straight into that buffer (place_sections, then seal), a prepare_into's way.
std::shared_ptr<UnitWeights> make_unit(int64_t rows, int64_t cols, bool extra,
                                       const BlobTarget* into = nullptr) {
  auto w = std::make_shared<UnitWeights>();
  w->rows = rows;
  w->cols = cols;
  w->isa = "unit_variant";
  w->ukernel_name = "unit_ukernel";
  w->layout_name = "unit_layout";
  if (into) {
    const int64_t sizes[3] = {rows * cols, 4 * rows, extra ? cols : 0};
    w->place_sections(*into, sizes);
  }
  auto* lay = static_cast<unsigned char*>(w->own_section(0, rows * cols, true));
  for (int64_t i = 0; i < rows * cols; ++i) lay[i] = uint8_t(i * 13 + 1);
  auto* sc = static_cast<float*>(w->own_section(1, 4 * rows));
  for (int64_t r = 0; r < rows; ++r) sc[r] = 0.5f + float(r);
  if (extra) {
    auto* x = static_cast<unsigned char*>(w->own_section(2, cols));
    for (int64_t i = 0; i < cols; ++i) x[i] = uint8_t(200 - i);
  }
  if (into) w->seal({});
  return w;
}

AlignedBuffer to_blob(const PackedWeights& w, const PackedWeights::SerializeOptions& o = {}) {
  AlignedBuffer b(size_t(w.serialized_size(o)));
  w.serialize(b.data<unsigned char>(), int64_t(b.size()), o);
  return b;
}

// The unit op's import: the header parsed, the sections' sizes from its dims.
std::shared_ptr<const UnitWeights> import_unit(const unsigned char* buf, int64_t size,
                                               std::shared_ptr<const void> owner) {
  const blob::Header h = blob::parse(buf, size, kUnit, "buffer");
  auto w = std::make_shared<UnitWeights>();
  w->rows = h.dims[0];
  w->cols = h.dims[1];
  const int64_t extra = h.sections > 2 ? int64_t(h.section[2].size) : 0;
  const int64_t expected[3] = {w->rows * w->cols, 4 * w->rows, extra ? w->cols : 0};
  const char* const what[3] = {"layout", "scales", "extra"};
  w->view_blob(h, buf, size, std::move(owner), expected, what, "buffer");
  return w;
}

void expect_same_sections(const PackedWeights& a, const PackedWeights& b) {
  ASSERT_EQ(a.sections(), b.sections());
  for (int i = 0; i < a.sections(); ++i) {
    ASSERT_EQ(a.section_bytes(i), b.section_bytes(i)) << "section " << i;
    if (a.section_bytes(i)) {
      EXPECT_EQ(0, std::memcmp(a.section(i), b.section(i), size_t(a.section_bytes(i))))
          << "section " << i;
    }
  }
}

TEST(PackedWeights, OwnedSectionsRoundTripAsViews) {
  for (const bool extra : {false, true})
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 70}, {0, 5}}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + (extra ? " extra" : ""));
      const auto w = make_unit(rows, cols, extra);
      EXPECT_FALSE(w->is_view());
      EXPECT_EQ(w->op, "unit");
      EXPECT_EQ(w->nbytes(), rows * cols);
      EXPECT_EQ(w->scale_bytes(), 4 * rows);
      EXPECT_EQ(w->scales() != nullptr, rows > 0);
      const AlignedBuffer b = to_blob(*w);
      const auto* p = b.data<unsigned char>();
      const blob::Header h = blob::parse(p, int64_t(b.size()), kUnit, "buffer");
      EXPECT_NO_THROW(blob::verify_checksum(h, p, "buffer"));
      EXPECT_EQ(blob::name(h.variant), "unit_variant");
      EXPECT_EQ(blob::name(h.ukernel), "unit_ukernel");
      EXPECT_EQ(blob::name(h.layout), "unit_layout");
      EXPECT_EQ(blob::name(h.format), "unit_format");
      EXPECT_EQ(h.dims[0], rows);
      EXPECT_EQ(h.dims[1], cols);

      const auto v = import_unit(p, int64_t(b.size()), nullptr);
      EXPECT_TRUE(v->is_view());
      EXPECT_EQ(v->isa, "unit_variant");
      EXPECT_EQ(v->ukernel_name, "unit_ukernel");
      EXPECT_EQ(v->layout_name, "unit_layout");
      EXPECT_EQ(v->shape(), w->shape());
      expect_same_sections(*w, *v);
      for (int i = 0; i < v->sections(); ++i) {  // zero-copy: where the header puts it
        if (v->section_bytes(i)) {
          EXPECT_EQ(v->section(i), p + h.section[i].offset);
        }
      }
      // The view serialises to the same bytes.
      const AlignedBuffer again = to_blob(*v);
      ASSERT_EQ(again.size(), b.size());
      EXPECT_EQ(0, std::memcmp(again.data(), b.data(), b.size()));
    }
}

// Packing straight into the serialised form (place_sections, own_section, seal): into a
// buffer of garbage, the bytes serialize writes for the same weights (the header, the padding
// zeroed, the checksum), viewed in place, holding the buffer's owner until the last view goes.
TEST(PackedWeights, PlacedSectionsSealToTheSerialisedBytes) {
  for (const bool extra : {false, true})
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 70}, {0, 5}, {2, 64}}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + (extra ? " extra" : ""));
      const AlignedBuffer expected = to_blob(*make_unit(rows, cols, extra));
      BlobTarget t = blob::testing::garbage_target(int64_t(expected.size()));
      std::weak_ptr<const void> owner = t.owner;
      auto w = make_unit(rows, cols, extra, &t);
      blob::testing::expect_blob(*w, t, expected);
      EXPECT_NO_THROW(blob::verify_checksum(blob::parse(t.p, t.size, kUnit, "buffer"), t.p, "buffer"));
      t.owner.reset();
      EXPECT_FALSE(owner.expired()) << "the weights must hold the buffer's owner";
      const AlignedBuffer again = to_blob(*w);  // the view serialises to the same bytes
      EXPECT_EQ(0, std::memcmp(again.data(), expected.data(), expected.size()));
      w.reset();
      EXPECT_TRUE(owner.expired()) << "the weights released the owner";
    }
}

TEST(PackedWeights, PlaceSectionsRefusesAWrongSizeOrAlignmentNamingOut) {
  const int64_t n = to_blob(*make_unit(2, 64, false)).size();
  for (const int64_t wrong : {n - 1, n + 1, n + 64, int64_t(0)}) {
    BlobTarget t = blob::testing::garbage_target(std::max<int64_t>(wrong, 1));
    t.size = wrong;
    blob::testing::expect_out_error([&] { make_unit(2, 64, false, &t); }, std::to_string(n) + " bytes");
  }
  BlobTarget t = blob::testing::garbage_target(n + 64);
  t.p += 8;
  t.size = n;
  blob::testing::expect_out_error([&] { make_unit(2, 64, false, &t); }, "64-byte boundary");
  EXPECT_EQ(t.p[0], 0xA5) << "nothing is written before the checks";
}

// A section packed at another size than planned, or not packed at all, is a bug of the op's
// section sizes: std::logic_error, never a header that lies.
TEST(PackedWeights, SectionsOfAnotherSizeThanPlannedAreRefused) {
  const int64_t sizes[3] = {6, 8, 0};
  const blob::LayoutPlan plan = blob::plan(sizes, 3);
  {
    BlobTarget t = blob::testing::garbage_target(int64_t(plan.total));
    UnitWeights w;
    w.place_sections(t, sizes);
    EXPECT_THROW(w.own_section(0, 7), std::logic_error);
  }
  {
    BlobTarget t = blob::testing::garbage_target(int64_t(plan.total));
    UnitWeights w;
    w.rows = 2;
    w.cols = 3;
    w.place_sections(t, sizes);
    w.own_section(0, 6);
    EXPECT_THROW(w.seal({}), std::logic_error);  // the scales never packed
  }
}

// A call's variant= on packed weights: none or their own variant; any other names "variant".
TEST(PackedWeights, CheckVariantAcceptsNoneOrTheirOwnVariant) {
  const auto w = make_unit(2, 3, false);
  EXPECT_NO_THROW(w->check_variant(""));
  EXPECT_NO_THROW(w->check_variant("unit_variant"));
  for (const char* other : {"avx2", "unit_variant2", "unit"}) {
    try {
      w->check_variant(other);
      ADD_FAILURE() << other << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("variant: ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find("'unit_variant'"), std::string::npos) << e.what();
    }
  }
}

TEST(PackedWeights, ViewKeepsItsOwnerAlive) {
  const auto w = make_unit(4, 9, true);
  bool released = false;
  auto blob_mem = std::make_shared<AlignedBuffer>(to_blob(*w));
  const auto* p = blob_mem->data<unsigned char>();
  const int64_t size = int64_t(blob_mem->size());
  std::shared_ptr<const void> owner(blob_mem.get(), [keep = blob_mem, &released](const void*) mutable {
    released = true;
    keep.reset();
  });
  blob_mem.reset();
  auto v = import_unit(p, size, std::move(owner));
  ASSERT_FALSE(released) << "the view must hold its owner";
  std::shared_ptr<const PackedWeights> as_base = v;
  v.reset();
  ASSERT_FALSE(released);
  expect_same_sections(*w, *as_base);  // still readable: the memory is alive
  as_base.reset();
  EXPECT_TRUE(released) << "the last view released its owner";
}

TEST(PackedWeights, SerializeRefusesWrongSizesAndOverlaps) {
  const auto w = make_unit(2, 64, false);
  const int64_t n = w->serialized_size();
  AlignedBuffer b(size_t(n + 64));
  auto* p = b.data<unsigned char>();
  for (const int64_t wrong : {n - 1, n + 1, int64_t(0)}) {
    try {
      w->serialize(p, wrong);
      ADD_FAILURE() << "size " << wrong << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("out: ", 0), 0u) << e.what();
    }
  }
  // out over the weights' own sections, or over the buffer a view reads.
  auto* own = static_cast<unsigned char*>(const_cast<void*>(w->section(0)));
  EXPECT_THROW(w->serialize(own, n), InvalidArgument);
  w->serialize(p, n);
  const auto v = import_unit(p, n, nullptr);
  try {
    v->serialize(p, n);
    ADD_FAILURE() << "out over the viewed buffer accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("out: ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("'weights'"), std::string::npos) << e.what();
  }
  // check_disjoint_from: every section and the buffer; disjoint memory passes.
  EXPECT_THROW(v->check_disjoint_from(p + n - 1, 1, "y", "w"), InvalidArgument);
  EXPECT_NO_THROW(v->check_disjoint_from(p + n, 64, "y", "w"));
}

TEST(PackedWeights, ViewRefusesSectionsOfTheWrongSize) {
  const auto w = make_unit(3, 20, true);
  AlignedBuffer b = to_blob(*w);
  auto* p = b.data<unsigned char>();
  blob::Header h = blob::testing::header_of(p);
  h.dims[1] = 21;  // the layout section no longer matches rows * cols
  std::memcpy(p, &h, sizeof h);
  blob::testing::restamp(p);
  try {
    import_unit(p, int64_t(b.size()), nullptr);
    ADD_FAILURE() << "a layout of the wrong size was viewed";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("buffer: ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("layout"), std::string::npos) << e.what();
  }
}

// ---- the real ops through the base class ----

// Serialises through the base class, imports with the op's from_buffer, and checks the view
// against the weights and the header; then a blob with a dim changed (checksum re-stamped,
// so only the section-size checks can see it) is refused.
template <class Import>
void check_op(const PackedWeights& w, Import import, int dim_to_change) {
  SCOPED_TRACE(w.op + " " + w.isa);
  EXPECT_EQ(std::string(w.blob_format.op), w.op);
  EXPECT_FALSE(w.is_view());
  EXPECT_FALSE(w.ukernel_name.empty());
  EXPECT_FALSE(w.layout_name.empty());
  const AlignedBuffer b = to_blob(w);
  const auto* p = b.data<unsigned char>();
  const blob::Header h = blob::parse(p, int64_t(b.size()), w.blob_format, "buffer");
  EXPECT_EQ(blob::name(h.variant), w.isa);
  EXPECT_EQ(blob::name(h.ukernel), w.ukernel_name);
  EXPECT_EQ(blob::name(h.layout), w.layout_name);

  const std::shared_ptr<const PackedWeights> v = import(p, int64_t(b.size()));
  EXPECT_TRUE(v->is_view());
  EXPECT_EQ(v->op, w.op);
  EXPECT_EQ(v->weight_format, w.weight_format);
  EXPECT_EQ(v->act, w.act);
  EXPECT_EQ(v->isa, w.isa);
  EXPECT_EQ(v->ukernel_name, w.ukernel_name);
  EXPECT_EQ(v->layout_name, w.layout_name);
  EXPECT_EQ(v->shape(), w.shape());
  EXPECT_EQ(v->nbytes(), w.nbytes());
  expect_same_sections(w, *v);
  for (int i = 0; i < v->sections(); ++i) {
    if (v->section_bytes(i)) {
      EXPECT_EQ(v->section(i), p + h.section[i].offset) << i;
    }
  }
  EXPECT_EQ(v->scale_bytes() > 0, w.scales() != nullptr);

  AlignedBuffer bad(b.size());
  std::memcpy(bad.data(), b.data(), b.size());
  auto* q = bad.data<unsigned char>();
  blob::Header hb = blob::testing::header_of(q);
  hb.dims[dim_to_change] += 64;  // past any tile padding: the sections' sizes change
  std::memcpy(q, &hb, sizeof hb);
  blob::testing::restamp(q);
  EXPECT_THROW(import(q, int64_t(bad.size())), InvalidArgument);
}

TEST(PackedWeights, Ternary) {
  const int64_t m = 19, k = 70;
  std::vector<uint32_t> packed(size_t(m * ternary_codes::words_for(k)));
  std::vector<int8_t> w(size_t(m * k));
  for (size_t i = 0; i < w.size(); ++i) w[i] = int8_t(int(i * 7 % 3) - 1);
  ternary::pack(w.data(), m, k, packed.data());
  std::vector<float> scale(size_t(m), 0.25f);
  for (const float* s : {static_cast<const float*>(nullptr), static_cast<const float*>(scale.data())}) {
    const auto p = ternary::prepare(packed.data(), m, ternary::words_for(k), k, s, "");
    EXPECT_EQ(p->op, "ternary");
    EXPECT_EQ(p->weight_format, "ternary");
    EXPECT_EQ(p->act, "fp32");
    EXPECT_EQ(p->shape(), (std::vector<int64_t>{m, k}));
    EXPECT_EQ(p->has_scale(), s != nullptr);
    EXPECT_EQ(p->section(ternary::PreparedWeights::kF32Layout), p->layout());
    EXPECT_EQ(p->scales(), p->section(ternary::PreparedWeights::kScales));
    check_op(*p, [](const unsigned char* b, int64_t n) {
      return ternary::from_buffer(b, n, nullptr, {});
    }, 1);
  }
}

TEST(PackedWeights, WidelyLinear) {
  const int64_t stages = 2, n = 5, m = 37, words = ternary_codes::words_for(m);
  std::vector<uint32_t> planes(size_t(stages * 4 * n * words));
  std::vector<int8_t> row(static_cast<size_t>(m));
  for (int64_t r = 0; r < stages * 4 * n; ++r) {
    for (int64_t j = 0; j < m; ++j) row[size_t(j)] = int8_t(int((r + j) % 3) - 1);
    ternary::pack(row.data(), 1, m, planes.data() + r * words);
  }
  std::vector<float> scales(size_t(stages * 4), 0.5f);
  const auto l = widely_linear::prepare(planes.data(), scales.data(), false, stages, n, words, m, "");
  EXPECT_EQ(l->op, "widely_linear");
  EXPECT_EQ(l->weight_format, "ternary");
  EXPECT_EQ(l->shape(), (std::vector<int64_t>{2 * n, 2 * m}));
  EXPECT_EQ(l->scale_bytes(), 4 * stages * 4 * n);
  check_op(*l, [](const unsigned char* b, int64_t size) {
    return widely_linear::from_buffer(b, size, nullptr, {});
  }, 1);
}

TEST(PackedWeights, Moe) {
  const int64_t e = 2, o = 8, i = 64;
  std::vector<bf16_t> w(size_t(e * o * i));
  for (size_t x = 0; x < w.size(); ++x) w[x] = f32_to_bf16(float(int(x % 11) - 5) * 0.125f);
  const auto p = moe::prepare(w.data(), e, o, i, "");
  EXPECT_EQ(p->op, "moe");
  EXPECT_EQ(p->weight_format, "bf16");
  EXPECT_EQ(p->act, "bf16");
  EXPECT_EQ(p->shape(), (std::vector<int64_t>{e, o, i}));
  EXPECT_EQ(p->scales(), nullptr);
  EXPECT_EQ(static_cast<const void*>(p->packed()), p->section(0));
  check_op(*p, [](const unsigned char* b, int64_t n) {
    return moe::from_buffer(b, n, nullptr, {});
  }, 1);
  // Another op's blob is refused by name.
  const AlignedBuffer b = to_blob(*p);
  EXPECT_THROW(ternary::from_buffer(b.data<unsigned char>(), int64_t(b.size()), nullptr, {}),
               InvalidArgument);
}

}  // namespace
}  // namespace cpukern
