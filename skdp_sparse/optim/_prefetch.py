"""A cache hint for Numba kernels whose loads wait on memory."""

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, array, index):
    """Ask the processor to bring ``array[index]`` into its caches, without waiting for
    it (``llvm.prefetch``; a hint, with no effect on any value, valid for any index)."""

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, array_type, array, [args[1]],
                                       wraparound=False)
        byte_ptr, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32]),
            "llvm.prefetch.p0i8")
        # A read, kept in every cache level, of data.
        builder.call(fn, [builder.bitcast(ptr, byte_ptr), ir.Constant(i32, 0),
                          ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(array, index), codegen
