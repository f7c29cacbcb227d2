#include <criterion/criterion.h>
Test(peers, placeholder) { cr_assert(1); }
