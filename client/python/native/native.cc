// tdock._native: the C++ client's data calls for the Python client
// (client/python/tdock/_native_path.py says when they are used).
//
// A Put comes as the Python client builds it: its PutRequest header,
// serialized, and its columns, each a name, a dtype, its item offsets and
// the buffers holding its rows back to back. The buffers are borrowed
// through the buffer protocol (C-contiguous, held until the call returns,
// so a view freed under it stays valid) and sent by tdock::Client::Put with
// the GIL released: to a standalone server, or to a controller's shard over
// gRPC or through its shared memory, as the C++ client does. A failed call
// raises Error(code, message, refusal, drop_reason, free_groups): the
// status code, and the dock's refusal when it carries one, which the
// Python side turns into the same tdock.errors class a grpcio call raises.
#include <Python.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "common/dtype.h"
#include "common/refusal.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"

namespace py = pybind11;

namespace tdock {
namespace {

PyObject* g_error = nullptr;  // tdock._native.Error

[[noreturn]] void Raise(const absl::Status& status) {
  const RefusalInfo why = RefusalOf(status);
  py::tuple args = py::make_tuple(static_cast<int>(status.code()), std::string(status.message()),
                                  static_cast<int>(why.why), static_cast<int>(why.drop),
                                  why.free_groups);
  PyErr_SetObject(g_error, args.ptr());
  throw py::error_already_set();
}

// A caller's buffer, held (C-contiguous, read-only access) while a call
// reads it.
class Held {
 public:
  Held(const py::handle& object, const std::string& what) {
    if (PyObject_GetBuffer(object.ptr(), &view_, PyBUF_C_CONTIGUOUS) != 0) {
      PyErr_Clear();
      Raise(absl::InvalidArgumentError(absl::StrCat(
          what, ": a ", Py_TYPE(object.ptr())->tp_name,
          " that gives no C-contiguous buffer (a non-contiguous array or tensor, or one not "
          "in host memory)")));
    }
    held_ = true;
  }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  ~Held() {
    if (held_) PyBuffer_Release(&view_);
  }

  ByteSpan bytes() const {
    return ByteSpan(static_cast<const char*>(view_.buf), static_cast<size_t>(view_.len));
  }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

// One column of a Put, its buffers held: a single buffer is sent in place,
// several are joined first (with the GIL released).
struct HeldColumn {
  ClientColumn column;
  std::vector<std::unique_ptr<Held>> pieces;
};

HeldColumn TakeColumn(const py::handle& item, const std::string& dock, size_t index) {
  if (!py::isinstance<py::tuple>(item) || py::len(item) != 4 ||
      !py::isinstance<py::list>(py::reinterpret_borrow<py::tuple>(item)[3])) {
    Raise(absl::InvalidArgumentError(
        absl::StrCat("put into dock '", dock, "': column ", index,
                     " is not a tuple (name, dtype, offsets, [pieces])")));
  }
  const py::tuple fields = py::reinterpret_borrow<py::tuple>(item);
  HeldColumn out;
  out.column.name = fields[0].cast<std::string>();
  const std::string what =
      absl::StrCat("put into dock '", dock, "': column '", out.column.name, "'");
  const int dtype = fields[1].cast<int>();
  if (!IsValidDType(dtype)) {
    Raise(absl::InvalidArgumentError(absl::StrCat(what, ": no dtype has the value ", dtype)));
  }
  out.column.dtype = static_cast<DType>(dtype);
  {
    const Held offsets(fields[2], absl::StrCat(what, "'s offsets"));
    const ByteSpan bytes = offsets.bytes();
    if (bytes.size() % sizeof(int64_t) != 0) {
      Raise(absl::InvalidArgumentError(
          absl::StrCat(what, ": its offsets are ", bytes.size(), " bytes, not int64 values")));
    }
    out.column.offsets.resize(bytes.size() / sizeof(int64_t));
    std::memcpy(out.column.offsets.data(), bytes.data(), bytes.size());
  }
  for (const py::handle piece : py::reinterpret_borrow<py::list>(fields[3])) {
    out.pieces.push_back(std::make_unique<Held>(piece, what));
  }
  return out;
}

class NativeClient {
 public:
  explicit NativeClient(const py::dict& settings) {
    auto text = [&](const char* key) {
      return settings.contains(key) && !settings[key].is_none()
                 ? settings[key].cast<std::string>()
                 : std::string();
    };
    auto seconds = [&](const char* key) {
      return absl::Seconds(settings[key].cast<double>());
    };
    options_.address = text("address");
    options_.token = text("token");
    options_.tls.enabled = settings["tls"].cast<bool>();
    options_.tls.ca_file = text("ca");
    options_.tls.cert_file = text("cert");
    options_.tls.key_file = text("key");
    options_.tls.server_name = text("server_name");
    options_.timeout = seconds("timeout");
    options_.max_message_bytes = settings["max_message_bytes"].cast<int64_t>();
    options_.connect_timeout = seconds("connect_timeout");
    options_.max_reconnect_backoff = seconds("max_reconnect_backoff");
    options_.transport = text("transport");
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options_);
    if (!client.ok()) Raise(client.status());
    client_ = *std::move(client);
  }

  // Sends the Put whose PutRequest header (columns aside) is `header`, to
  // the shard at `shard_address` whose shared memory is `shm_prefix` (empty
  // address: a standalone server): (rows, bytes, assigned, replayed) of its
  // PutAck.
  py::tuple Put(const py::bytes& header, const py::list& columns,
                const std::string& shard_address, const std::string& shm_prefix) {
    v1::PutRequest request;
    {
      char* data = nullptr;
      Py_ssize_t size = 0;
      PyBytes_AsStringAndSize(header.ptr(), &data, &size);
      if (!request.ParseFromArray(data, static_cast<int>(size))) {
        Raise(absl::InvalidArgumentError("put: its header is not a PutRequest"));
      }
    }
    absl::StatusOr<ClientPut> put = internal::PutOfHeader(request);
    if (!put.ok()) Raise(put.status());
    put->shard_address = shard_address;
    put->shard_shm_prefix = shm_prefix;
    std::vector<HeldColumn> held;
    held.reserve(columns.size());
    for (size_t i = 0; i < columns.size(); ++i) {
      held.push_back(TakeColumn(columns[i], put->dock, i));
    }
    absl::StatusOr<PutAck> ack;
    {
      py::gil_scoped_release unlocked;
      for (HeldColumn& column : held) {
        if (column.pieces.size() == 1) {
          column.column.borrows = true;
          column.column.borrowed = column.pieces[0]->bytes();
        } else {
          size_t total = 0;
          for (const auto& piece : column.pieces) total += piece->bytes().size();
          column.column.owned.reserve(total);
          for (const auto& piece : column.pieces) {
            column.column.owned.append(piece->bytes().data(), piece->bytes().size());
          }
        }
        put->columns.push_back(std::move(column.column));
      }
      ack = client_->Put(*put);
    }
    if (!ack.ok()) Raise(ack.status());
    return py::make_tuple(ack->rows, ack->bytes, py::cast(ack->assigned), ack->replayed);
  }

 private:
  ClientOptions options_;
  std::unique_ptr<Client> client_;
};

}  // namespace
}  // namespace tdock

PYBIND11_MODULE(_native, m) {
  m.doc() = "The C++ client's data calls for tdock.Client (tdock._native_path).";
  tdock::g_error = PyErr_NewException("tdock._native.Error", PyExc_Exception, nullptr);
  m.attr("Error") = py::handle(tdock::g_error);
  py::class_<tdock::NativeClient>(m, "Client")
      .def(py::init<const py::dict&>(), py::arg("settings"))
      .def("put", &tdock::NativeClient::Put, py::arg("header"), py::arg("columns"),
           py::arg("shard_address"), py::arg("shm_prefix"));
}
