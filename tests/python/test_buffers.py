"""What counts as a buffer: zero-copy use of the caller's memory, the dtype taken from the
object, and clear errors naming the argument for anything else. One rank suffices here."""

import array

import numpy as np
import pytest

from conftest import import_braid

braid = import_braid()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64])
def test_numpy_results_land_in_the_callers_array(solo, dtype):
    src = np.arange(6).astype(dtype)
    dst = np.zeros(6, dtype)
    solo.all_reduce(src, dst)
    assert np.array_equal(dst, src)
    # Writes reach the array through a view too: the result is in the original object.
    base = np.zeros(12, dtype)
    solo.broadcast(src, base[6:])
    assert np.array_equal(base[6:], src) and not base[:6].any()


def test_other_buffer_objects_are_written_in_place(solo):
    src = np.arange(1, 9, dtype=np.uint8)
    ba = bytearray(8)
    solo.all_reduce(src, ba)
    assert ba == bytearray(range(1, 9))
    mv = memoryview(bytearray(8))
    solo.all_reduce(src, mv)
    assert mv.tobytes() == bytes(range(1, 9))
    arr = array.array("i", [0, 0, 0])
    solo.all_reduce(np.array([4, 5, 6], np.int32), arr)
    assert arr.tolist() == [4, 5, 6]
    solo.all_reduce(bytes(range(8)), bytearray(8))  # read-only input is fine


def test_torch_tensors_are_used_without_copying(solo):
    torch = pytest.importorskip("torch", reason="torch (python3-torch) is not installed")
    src = torch.arange(5, dtype=torch.bfloat16)
    dst = torch.zeros(5, dtype=torch.bfloat16)
    ptr = dst.data_ptr()
    solo.all_reduce(src, dst)
    assert torch.equal(dst, src) and dst.data_ptr() == ptr
    # A tensor shares memory with its numpy view: the write is seen through both.
    t = torch.zeros(4)
    view = t.numpy()
    solo.broadcast(np.full(4, 7, np.float32), t)
    assert view.tolist() == [7.0] * 4
    with pytest.raises(ValueError, match="argument 'send' is a non-contiguous tensor"):
        solo.all_reduce(torch.zeros(4, 4).t())
    with pytest.raises(TypeError, match="argument 'send' has dtype torch.complex64"):
        solo.all_reduce(torch.zeros(4, dtype=torch.complex64))


@pytest.mark.parametrize("call, exc, text", [
    (lambda c: c.all_reduce(np.zeros(8)[::2]), ValueError, "all_reduce: argument 'send' .* is not C-contiguous"),
    (lambda c: c.all_reduce(np.zeros(4), bytes(32)), ValueError, "argument 'recv' \\(bytes\\) is read-only"),
    (lambda c: c.all_reduce(bytes(4)), ValueError, "argument 'send' \\(bytes\\) is read-only"),
    (lambda c: c.recv(_ro(), 0), ValueError, "recv: argument .buf. \\(ndarray\\) is read-only"),
    (lambda c: c.all_reduce([1, 2, 3]), TypeError, "argument 'send' \\(list\\) does not expose a buffer"),
    (lambda c: c.all_reduce(None), TypeError, "argument 'send' is None"),
    (lambda c: c.all_reduce(np.zeros(4, np.uint32)), TypeError, "format 'I'.*which braid lacks"),
    (lambda c: c.all_reduce(np.zeros(4, np.int16)), TypeError, "format 'h'"),
    (lambda c: c.all_reduce(np.zeros(4, bool)), TypeError, "format '\\?'"),
    (lambda c: c.all_reduce(np.zeros(4, np.float32), np.zeros(4, np.int32)), TypeError,
     "argument 'recv' holds i32 but 'send' holds f32"),
    (lambda c: c.all_reduce(np.zeros(4), np.zeros(5)), ValueError, "argument 'recv' holds 5 elements"),
    (lambda c: c.all_gather(np.zeros(4), np.zeros(5)), ValueError, "size \\* len\\(send\\) = 4"),
    (lambda c: c.all_gatherv(np.zeros(4), np.zeros(4), [4, 4]), ValueError, "'counts' has 2 entries"),
    (lambda c: c.all_reduce(np.zeros(4), op="mean"), ValueError, "op 'mean' is not one of"),
    (lambda c: c.broadcast(np.zeros(4), root=1), ValueError, "root 1 is not a rank"),
    (lambda c: c.send(np.zeros(4), peer=-1), ValueError, "peer -1 is not a rank"),
])
def test_bad_buffers_name_the_argument(solo, call, exc, text):
    with pytest.raises(exc, match=text):
        call(solo)


def _ro():
    a = np.zeros(4)
    a.setflags(write=False)
    return a


def test_ops_by_enum_and_name(solo):
    a = np.array([3, 1], np.int32)
    solo.all_reduce(a, op=braid.Op.max)
    solo.all_reduce(a, op="bxor")
    assert a.tolist() == [3, 1]


def test_closed_communicator_refuses_calls(solo):
    solo.close()
    assert solo.closed
    with pytest.raises(ValueError, match="barrier: the communicator is closed"):
        solo.barrier()
    solo.close()  # twice is fine
