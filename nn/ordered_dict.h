#pragma once
// OrderedDict: items kept in insertion order and found by key, as torch::OrderedDict, which is what
// Module::named_parameters() and named_buffers() return.
//
//   nn::Linear fc(4, 2);
//   auto params = fc->named_parameters();
//   Tensor w = params["weight"];                     // by key (a missing key throws, naming it)
//   if (Tensor* b = params.find("bias")) b->sizes();  // or null
//   for (auto& [name, p] : params) std::cout << name << " " << p.sizes() << "\n";   // "weight", then "bias"
//   for (auto& item : params) item.key(), item.value();                              // libtorch's spelling

#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "strata/tensor/error.h"

namespace strata {

/// Items in insertion order with lookup by key; keys are unique.
template <class Key, class Value>
class OrderedDict {
 public:
  /// One key and its value; also a std::pair, so `auto& [key, value] : dict` works.
  struct Item : std::pair<Key, Value> {
    using std::pair<Key, Value>::pair;
    const Key& key() const { return this->first; }       ///< the key
    Value& value() { return this->second; }              ///< the value
    const Value& value() const { return this->second; }  ///< the value
  };

  /// Adds key with value at the end; a key already present throws.
  Value& insert(Key key, Value value) {
    STRATA_CHECK(!index_.contains(key), "OrderedDict: key '", key, "' already defined");
    index_.emplace(key, items_.size());
    items_.emplace_back(std::move(key), std::move(value));
    return items_.back().second;
  }
  /// The value of key, or null when absent
  Value* find(const Key& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  /// The value of key, or null when absent
  const Value* find(const Key& key) const { return const_cast<OrderedDict*>(this)->find(key); }
  bool contains(const Key& key) const { return index_.contains(key); }  ///< whether key is present
  /// The value of key; an absent key throws, naming it
  Value& operator[](const Key& key) {
    Value* v = find(key);
    STRATA_CHECK(v, "OrderedDict: no such key: '", key, "'");
    return *v;
  }
  /// The value of key; an absent key throws, naming it
  const Value& operator[](const Key& key) const { return const_cast<OrderedDict&>(*this)[key]; }
  /// The item at position i in insertion order; out of range throws
  Item& operator[](size_t i) {
    STRATA_CHECK(i < items_.size(), "OrderedDict: index ", i, " is out of range for ", items_.size(), " items");
    return items_[i];
  }
  /// The item at position i in insertion order; out of range throws
  const Item& operator[](size_t i) const { return const_cast<OrderedDict&>(*this)[i]; }

  size_t size() const { return items_.size(); }              ///< number of items
  bool is_empty() const { return items_.empty(); }           ///< whether there are none (libtorch's name)
  bool empty() const { return items_.empty(); }              ///< whether there are none
  Item& front() { return (*this)[size_t{0}]; }               ///< the first item; throws when empty
  const Item& front() const { return (*this)[size_t{0}]; }   ///< the first item; throws when empty
  auto begin() { return items_.begin(); }                    ///< items in insertion order
  auto end() { return items_.end(); }                        ///< past the last item
  auto begin() const { return items_.begin(); }              ///< items in insertion order
  auto end() const { return items_.end(); }                  ///< past the last item
  const std::vector<Item>& items() const { return items_; }  ///< every item, in order
  /// The keys, in order
  std::vector<Key> keys() const {
    std::vector<Key> out;
    for (const Item& item : items_) out.push_back(item.first);
    return out;
  }
  /// The values, in order
  std::vector<Value> values() const {
    std::vector<Value> out;
    for (const Item& item : items_) out.push_back(item.second);
    return out;
  }

 private:
  std::vector<Item> items_;
  std::unordered_map<Key, size_t> index_;
};

}  // namespace strata
